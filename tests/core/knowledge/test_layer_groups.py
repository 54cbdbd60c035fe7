"""Variable names grouped by the layer that owns them."""

from gradient_doctor.core.knowledge.layer_groups import LayerGroup, describe_layers, group_by_layer


def test_groups_keep_the_order_of_first_appearance_and_drop_output_indices():
    names = ("gen/dense/kernel:0", "gen/norm/gamma", "gen/dense/bias:0", "step")
    assert group_by_layer(names) == (
        LayerGroup("gen/dense", ("kernel", "bias")),
        LayerGroup("gen/norm", ("gamma",)),
        LayerGroup("step", ()),
    )


def test_one_layer_lists_its_variables():
    groups = group_by_layer(("gen/dense/kernel", "gen/dense/bias"))
    assert describe_layers(groups) == "layer `gen/dense`: kernel, bias"


def test_many_layers_stop_after_the_limit():
    groups = group_by_layer(tuple(f"model/layer_{i}/kernel" for i in range(6)))
    assert describe_layers(groups, limit=2) == (
        "6 layers: `model/layer_0` (kernel), `model/layer_1` (kernel) and 4 more"
    )
