"""Numbers, counts and places as explanations write them."""

import pytest

from gradient_doctor.core.knowledge.wording import (
    approximately,
    at_step,
    count,
    format_number,
    listing,
    nonfinite_counts,
    op_place,
    rounding_note,
    value_range,
)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (712.4, "712.4"),
        (88.72283905206835, "88.72"),
        (11.089866488461016, "11.09"),
        (65504.0, "65504"),
        (3.4028234663852886e38, "3.4e+38"),
        (310000.7, "3.1e+05"),
        (0.8, "0.8"),
        (1e-12, "1e-12"),
        (-3.1, "-3.1"),
        (0.0, "0"),
        (float("inf"), "inf"),
        (float("-inf"), "-inf"),
        (float("nan"), "NaN"),
        (None, "unknown"),
    ],
)
def test_format_number_is_compact(value, text):
    assert format_number(value) == text


def test_format_number_can_show_how_far_past_a_boundary():
    assert format_number(1.0000001) == "1"
    assert format_number(1.0000001, digits=9) == "1.0000001"


def test_counts_lists_and_steps():
    assert count(1, "zero") == "1 zero"
    assert count(4, "zero") == "4 zeros"
    assert listing([4]) == "4"
    assert listing([4, 17, 20]) == "4, 17 and 20"
    assert listing(list(range(8))) == "0, 1, 2, 3, 4 and 3 more"
    assert at_step(57) == " at step 57"
    assert at_step(None) == ""
    assert rounding_note(1e-7) != ""
    assert rounding_note(0.5) == ""
    assert rounding_note(7.5e-4) == ""  # 1 + t with t just below -1: it crossed


def test_places_and_values(make_evidence, make_stats):
    origin = make_evidence(outputs=(make_stats(inf=17, nan=3),)).origin
    assert op_place(origin) == "Exp in layer `message_passing`"
    assert op_place(origin, "Sqrt") == "Sqrt in layer `message_passing`"
    assert nonfinite_counts(origin) == "17 inf and 3 NaN values"
    assert value_range(origin.inputs) == "from -3.1 to 712.4 (float32)"
    assert op_place(make_evidence(layer=None).origin) == "Exp"


def test_approximately_rounds_and_writes_whole_numbers_out():
    assert approximately(741.3) == "740"
    assert approximately(25.4) == "25"
    assert approximately(0.9812) == "0.98"
    assert approximately(1.234e-6) == "1.2e-06"
    assert approximately(3.4e38) == "3.4e+38"
    assert approximately(float("inf")) == "inf"
    assert approximately(741.3, significant=3) == "741"
