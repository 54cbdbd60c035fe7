"""The numeric limits of each floating-point dtype."""

import math

import pytest

from gradient_doctor.core.dtype_limits import dtype_limits


@pytest.mark.parametrize(
    ("dtype", "largest", "exp_limit", "smallest_normal"),
    [
        ("float16", 65504.0, 11.09, 6.1035e-05),
        ("bfloat16", 3.3895e38, 88.72, 1.1755e-38),
        ("float32", 3.4028e38, 88.72, 1.1755e-38),
        ("float64", 1.7976e308, 709.78, 2.2251e-308),
    ],
)
def test_limits_match_the_ieee_formats(dtype, largest, exp_limit, smallest_normal):
    limits = dtype_limits(dtype)
    assert limits.name == dtype
    assert limits.max == pytest.approx(largest, rel=1e-4)
    assert limits.exp_limit == pytest.approx(exp_limit, abs=0.005)
    assert limits.smallest_normal == pytest.approx(smallest_normal, rel=1e-4)


def test_exp_limit_is_the_log_of_the_largest_value():
    for dtype in ("float16", "bfloat16", "float32", "float64"):
        limits = dtype_limits(dtype)
        assert math.isfinite(math.exp(min(limits.exp_limit, 709.0)))
        assert limits.exp_limit == math.log(limits.max)


def test_bfloat16_keeps_float32_exponent_range():
    assert dtype_limits("bfloat16").exp_limit == pytest.approx(88.72, abs=0.01)
    assert dtype_limits("bfloat16").max < dtype_limits("float32").max


def test_names_are_case_insensitive_and_complex_uses_its_parts():
    assert dtype_limits(" Float32 ") == dtype_limits("float32")
    assert dtype_limits("complex128").max == dtype_limits("float64").max


def test_non_float_dtypes_get_float32_limits():
    assert dtype_limits("int32") == dtype_limits("float32")
    assert dtype_limits("bool") == dtype_limits("float32")


def test_float8_formats():
    assert dtype_limits("float8_e5m2").max == 57344.0
    assert dtype_limits("float8_e4m3fn").max == 448.0


def test_unknown_float_dtype_is_an_error_that_names_it():
    with pytest.raises(ValueError, match=r"Received: dtype='float8_e4m3b11fnuz'"):
        dtype_limits("float8_e4m3b11fnuz")
