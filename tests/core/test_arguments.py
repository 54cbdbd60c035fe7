"""Keras-style checks of constructor arguments."""

import math

import pytest

from gradient_doctor.core.arguments import check_float, check_int


def test_check_int_accepts_and_returns():
    assert check_int(5, "window", 3) == 5


@pytest.mark.parametrize("value", [1, 2.0, True, "3", None])
def test_check_int_names_the_argument_and_the_value(value):
    with pytest.raises(
        ValueError, match=r"`window` must be an int of at least 3. Received: window="
    ):
        check_int(value, "window", 3)


def test_check_int_message_echoes_the_value():
    with pytest.raises(
        ValueError, match=r"^`window` must be an int of at least 3. Received: window=1$"
    ):
        check_int(1, "window", 3)


def test_check_float_ranges():
    assert check_float(1, "factor") == 1.0
    assert check_float(0.0, "rise", 0.0, math.inf, True) == 0.0
    with pytest.raises(ValueError, match=r"`rise` must be a float >= 0. Received: rise=-1"):
        check_float(-1, "rise", 0.0, math.inf, True)
    with pytest.raises(ValueError, match=r"`threshold` must be a float in \(0, 1\). Received"):
        check_float(1.0, "threshold", 0.0, 1.0)
    with pytest.raises(ValueError, match=r"must be a float > 0. Received: factor=nan"):
        check_float(math.nan, "factor")
    with pytest.raises(ValueError, match=r"Received: factor=True"):
        check_float(True, "factor")
