"""Where gradient paths break, on hand-built dataflow graphs (no TensorFlow)."""

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.gradient_paths import (
    LEFT_FRAMEWORK,
    NEVER_READ,
    NON_DIFFERENTIABLE,
    NOT_USED,
    OUTSIDE_TAPE,
    Node,
    cancelled_biases,
    find_breaks,
)


def node(index, op, inputs, outputs, **flags):
    return Node(index, op, tuple(inputs), tuple(outputs), SourceLine("gan.py", index, op), **flags)


def test_argmax_on_the_main_path_wins_over_an_earlier_stop_gradient_on_a_side_path():
    nodes = [
        node(1, "ReadVariableOp", [100], [1]),
        node(2, "MatMul", [1, 50], [2]),
        node(3, "StopGradient", [2], [3], differentiable=False),  # inside a normalisation
        node(4, "Sub", [2, 3], [4]),
        node(5, "ArgMax", [4], [5], differentiable=False),
        node(6, "ResourceGather", [200, 5], [6]),
        node(7, "Mean", [6], [7]),
    ]
    (found,) = find_breaks(nodes, (7,), {"gen/kernel": (100,)})
    assert found.kind == NON_DIFFERENTIABLE
    assert found.node.op_type == "ArgMax"
    assert found.variables == ("gen/kernel",)
    assert found.picks_rows is True  # the picked tokens are looked up: an embedding


def test_an_index_made_a_mask_picks_no_rows():
    # A router's argmax cast to float and used as a mask of two experts' outputs.
    nodes = [
        node(1, "ReadVariableOp", [100], [1]),
        node(2, "MatMul", [1, 50], [2]),
        node(3, "ArgMax", [2], [3], differentiable=False),
        node(4, "Cast", [3], [4]),
        node(5, "StridedSlice", [4], [5]),
        node(6, "Mul", [5, 60], [6]),
        node(7, "AddV2", [6, 61], [7]),
        node(8, "Mean", [7], [8]),
    ]
    (found,) = find_breaks(nodes, (8,), {"router/kernel": (100,)})
    assert found.node.op_type == "ArgMax"
    assert found.picks_rows is False
    # Not a pick: the question does not arise.
    cast = [node(1, "ReadVariableOp", [100], [1]), node(2, "Cast", [1], [2], differentiable=False)]
    (found,) = find_breaks([*cast, node(3, "Mean", [2], [3])], (3,), {"v": (100,)})
    assert found.picks_rows is None


def test_an_argmin_to_the_decoder_wins_over_a_later_stop_gradient_in_a_loss_term():
    # A VQ-VAE without the straight-through estimator: the codes are picked by argmin
    # and looked up for the decoder, and the codebook term, added after, stops the
    # encoder's gradient on purpose. The argmin is what cuts the main flow.
    nodes = [
        node(1, "ReadVariableOp", [100], [1]),  # the encoder's kernel
        node(2, "Conv2D", [1, 50], [2]),
        node(3, "ArgMin", [2], [3], differentiable=False),
        node(4, "OneHot", [3], [4], differentiable=False),
        node(5, "MatMul", [4, 60], [5]),  # the codebook looked up
        node(6, "StopGradient", [2], [6], differentiable=False),
        node(7, "Sub", [6, 5], [7]),
        node(8, "Mean", [7], [8]),  # the codebook term
        node(9, "AddV2", [5, 8], [9]),  # the decoder's loss plus it
    ]
    (found,) = find_breaks(nodes, (9,), {"encoder/kernel": (100,)})
    assert (found.kind, found.node.op_type) == (NON_DIFFERENTIABLE, "ArgMin")


def test_top_k_indices_break_the_path_though_its_values_have_a_gradient():
    nodes = [
        node(1, "ReadVariableOp", [100], [1]),
        node(2, "MatMul", [1, 50], [2]),
        node(3, "TopKV2", [2, 51], [3, 4], integer_outputs=frozenset({4})),  # values, indices
        node(4, "GatherV2", [200, 4], [5]),  # a payoff table, at the indices
        node(5, "Mean", [5], [6]),
    ]
    (found,) = find_breaks(nodes, (6,), {"policy/kernel": (100,)})
    assert (found.kind, found.node.op_type) == (NON_DIFFERENTIABLE, "TopKV2")
    # When the values feed the loss, the path holds.
    nodes[3] = node(4, "GatherV2", [3, 4], [5])
    (found,) = find_breaks(nodes, (6,), {"policy/kernel": (100,)})
    assert found.kind != NON_DIFFERENTIABLE


def test_variables_breaking_at_the_same_op_are_grouped():
    nodes = [
        node(1, "ReadVariableOp", [100], [1]),
        node(2, "ReadVariableOp", [101], [2]),
        node(3, "AddV2", [1, 2], [3]),
        node(4, "Cast", [3], [4], differentiable=False),
        node(5, "Mean", [4], [5]),
    ]
    breaks = find_breaks(nodes, (5,), {"a/kernel": (100,), "a/bias": (101,)})
    assert [(b.kind, b.node.op_type, b.variables) for b in breaks] == [
        (NON_DIFFERENTIABLE, "Cast", ("a/kernel", "a/bias"))
    ]


def test_shape_reads_are_not_blamed_when_a_value_op_blocks():
    nodes = [
        node(1, "ReadVariableOp", [100], [1]),
        node(2, "Round", [1], [2], differentiable=False),
        node(3, "Shape", [1], [3], differentiable=False, structural=True),
        node(4, "RealDiv", [2, 3], [4]),
    ]
    (found,) = find_breaks(nodes, (4,), {"v": (100,)})
    assert found.node.op_type == "Round"


def test_op_run_after_the_tape_closed_is_outside_the_tape():
    nodes = [
        node(1, "ReadVariableOp", [100], [1]),
        node(2, "MatMul", [1, 50], [2]),
        node(3, "Sub", [2, 51], [3], recorded=False),
        node(4, "Mean", [3], [4], recorded=False),
    ]
    (found,) = find_breaks(nodes, (4,), {"v": (100,)})
    assert (found.kind, found.node.op_type) == (OUTSIDE_TAPE, "Sub")


def test_a_value_detached_then_taken_to_numpy_for_a_loss_made_anew_left_the_framework():
    # `p.detach().cpu().numpy()` in a dice helper, then `torch.tensor(1 - dice,
    # requires_grad=True)` as the loss: the exit after the detach is the break.
    nodes = [
        node(1, "ReadVariableOp", [100], [1]),
        node(2, "Sigmoid", [1], [2]),
        node(3, "StopGradient", [2], [3], differentiable=False, integer_outputs=frozenset({3})),
        node(4, "Numpy", [3], [], differentiable=False, leaves_framework=True),
        node(5, "LiftFresh", [79], [5]),  # 79: the Python number that came back
    ]
    (found,) = find_breaks(nodes, (5,), {"v": (100,)}, outside_values={79: ()})
    assert (found.kind, found.node.op_type) == (LEFT_FRAMEWORK, "Numpy")
    assert found.reentry.line == 5


def test_unread_and_unused_variables():
    nodes = [
        node(1, "ReadVariableOp", [100], [1]),
        node(2, "MatMul", [1, 50], [2]),  # its output goes nowhere
        node(3, "Mean", [60], [3]),
    ]
    breaks = find_breaks(nodes, (3,), {"used/kernel": (100,), "aux/kernel": ()})
    kinds = {b.variables: b.kind for b in breaks}
    assert kinds == {("used/kernel",): NOT_USED, ("aux/kernel",): NEVER_READ}


def test_value_that_comes_back_from_outside_is_a_round_trip():
    nodes = [
        node(1, "ReadVariableOp", [100], [1]),
        node(2, "Sigmoid", [1], [2], output_shapes=((32, 1),)),
        node(3, "Sub", [70, 71], [3]),  # 70: a constant made from NumPy, shaped like 2
        node(4, "Mean", [3], [4]),
    ]
    (found,) = find_breaks(nodes, (4,), {"v": (100,)}, outside_values={70: (32, 1)})
    assert found.kind == LEFT_FRAMEWORK
    assert found.node.op_type == "Sigmoid"
    assert found.reentry.line == 3


def test_a_bias_whose_layer_trains_cancels_and_others_do_not():
    zero = ["embed/dense_1/bias", "head/bias", "frozen/kernel", "frozen/bias", "w:0"]
    trained = ["embed/dense/kernel", "embed/dense/bias", "embed/dense_1/kernel", "head/scale"]
    assert cancelled_biases(zero, trained) == ("embed/dense_1/bias", "head/bias")
    # A layer none of whose variables trains keeps its zero bias (a dead path, say).
    assert cancelled_biases(["frozen/bias"], ["other/kernel"]) == ()
    # PyTorch's names.
    assert cancelled_biases(["net.2.bias"], ["net.2.weight"], separator=".") == ("net.2.bias",)
