"""Checks of constructor arguments in the core, with Keras-style error messages."""

from __future__ import annotations

import math


def check_int(value: object, name: str, minimum: int) -> int:
    """Return `value` when it is an int of at least `minimum`, else raise.

    Raises:
        ValueError: e.g. "`window` must be an int of at least 3. Received: window=1".
    """
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(
            f"`{name}` must be an int of at least {minimum}. Received: {name}={value!r}"
        )
    return value


def check_float(
    value: object,
    name: str,
    low: float = 0.0,
    high: float = math.inf,
    low_inclusive: bool = False,
    high_inclusive: bool = False,
) -> float:
    """Return `value` as a float when it is a finite number in the given range, else raise.

    Args:
        value: the argument to check.
        name: str, the argument's name, used in the error message.
        low: float, the lower bound. Defaults to 0.
        high: float, the upper bound (math.inf for none). Defaults to math.inf.
        low_inclusive: bool, whether `low` itself is allowed. Defaults to False.
        high_inclusive: bool, whether `high` itself is allowed. Defaults to False.

    Raises:
        ValueError: e.g. "`threshold` must be a float in (0, 1]. Received: threshold=2".
    """
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    number = float(value) if is_number else math.nan
    above = number >= low if low_inclusive else number > low
    below = number <= high if high_inclusive else number < high
    if not (math.isfinite(number) and above and below):
        if high == math.inf:
            wanted = f"a float {'>=' if low_inclusive else '>'} {low:g}"
        else:
            left, right = "[" if low_inclusive else "(", "]" if high_inclusive else ")"
            wanted = f"a float in {left}{low:g}, {high:g}{right}"
        raise ValueError(f"`{name}` must be {wanted}. Received: {name}={value!r}")
    return number
