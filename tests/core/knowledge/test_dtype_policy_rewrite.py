"""The half-precision policy line rewritten to the mixed policy, in the user's own quotes."""

import pytest

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.knowledge.rewrites.dtype_policy import mixed_policy


@pytest.mark.parametrize(
    ("code", "expected", "name"),
    [
        (
            'keras.config.set_dtype_policy("float16")',
            'keras.config.set_dtype_policy("mixed_float16")',
            "mixed_float16",
        ),
        (
            "mixed_precision.set_global_policy('float16')",
            "mixed_precision.set_global_policy('mixed_float16')",
            "mixed_float16",
        ),
        (
            'set_dtype_policy(policy="bfloat16")  # memory',
            'set_dtype_policy(policy="mixed_bfloat16")  # memory',
            "mixed_bfloat16",
        ),
    ],
)
def test_the_policy_literal_becomes_the_mixed_one(code, expected, name):
    lines = ["import keras", code, "model = build()"]
    edit, mixed = mixed_policy(SourceLine("train.py", 2, code), lines)
    assert (edit.line, edit.end_line, edit.new_lines, mixed) == (2, 2, (expected,), name)
    assert edit.old_lines == (code,)


@pytest.mark.parametrize(
    "code",
    [
        "keras.config.set_dtype_policy(args.policy)",  # not written as a string
        'keras.config.set_dtype_policy("mixed_float16")',  # already mixed
        'print("float16")',  # no policy setter
    ],
)
def test_anything_else_is_left_alone(code):
    assert mixed_policy(SourceLine("train.py", 1, code), [code]) is None
