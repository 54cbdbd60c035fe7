"""What the origin's `->` line is, said in the terminal and the JSON report."""

from dataclasses import replace

import pytest

from gradient_doctor.core.findings import Origin, SourceLine, TensorStats
from gradient_doctor.render.json_report import origin_to_dict
from gradient_doctor.render.text import origin_lines

_STATS = TensorStats("float32", (32, 16), -1.0, 3e38, 0, 124, 0)
_DENSE = Origin(
    op="MatMul",
    op_name="sequential/dense/MatMul",
    layer="sequential/dense",
    source=SourceLine("train.py", 12, "layers.Dense(", end_line=15),
    gradient_of=None,
    inputs=(_STATS,),
    outputs=(_STATS,),
    source_kind="layer_creation",
)


def test_a_layer_creation_line_says_which_layer_it_created():
    lines = origin_lines(_DENSE)
    assert lines[1:3] == [
        "  -> train.py:12   layers.Dense(",
        "     (created layer `sequential/dense`, where Keras ran MatMul)",
    ]


def test_an_update_origin_names_its_variable():
    update = replace(_DENSE, op="Square", variable="sequential/dense/kernel")
    lines = origin_lines(update)
    assert "variable: sequential/dense/kernel" in lines[0]
    assert (
        lines[2] == "     (created layer `sequential/dense`, which holds `sequential/dense/kernel`)"
    )


def test_a_state_write_says_what_it_wrote():
    written = replace(
        _DENSE,
        source=SourceLine("train.py", 9, "normalizer.adapt(table)"),
        source_kind="state_write",
        variable="normalization/mean",
    )
    assert origin_lines(written)[2] == "     (wrote `normalization/mean` before the step)"


def test_the_op_s_own_line_needs_no_note():
    own = replace(_DENSE, source_kind="op")
    assert not any(line.startswith("     (") for line in origin_lines(own))


@pytest.mark.parametrize(
    ("origin", "expected"),
    [
        (_DENSE, (15, "layer_creation", None)),
        (replace(_DENSE, source=None, source_kind="op"), (None, "op", None)),
        (
            replace(_DENSE, variable="sequential/dense/kernel"),
            (15, "layer_creation", "sequential/dense/kernel"),
        ),
    ],
)
def test_the_json_origin_carries_end_line_source_kind_and_variable(origin, expected):
    result = origin_to_dict(origin)
    assert (result["end_line"], result["source_kind"], result["variable"]) == expected
    assert result["line"] == (12 if origin.source else None)
