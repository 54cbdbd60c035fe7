"""Numeric limits of the floating-point dtypes the knowledge base reasons about."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class DtypeLimits:
    """Where values of one floating-point dtype leave the finite range.

    Attributes:
        name: the dtype's name, e.g. "float32".
        max: the largest finite value.
        exp_limit: the largest x for which exp(x) is finite, i.e. log(max).
        smallest_normal: the smallest positive normal value.
    """

    name: str
    max: float
    exp_limit: float
    smallest_normal: float


def _limits(name: str, mantissa_bits: int, max_exponent: int) -> DtypeLimits:
    """Build the limits of a binary IEEE-style format from its field widths."""
    largest = (2.0 - 2.0 ** (-mantissa_bits)) * 2.0 ** (max_exponent - 1)
    return DtypeLimits(
        name=name,
        max=largest,
        exp_limit=math.log(largest),
        smallest_normal=2.0 ** (2 - max_exponent),
    )


# Complex dtypes overflow where their real and imaginary parts do.
_KNOWN = {
    "float16": _limits("float16", mantissa_bits=10, max_exponent=16),
    "bfloat16": _limits("bfloat16", mantissa_bits=7, max_exponent=128),
    "float32": _limits("float32", mantissa_bits=23, max_exponent=128),
    "float64": _limits("float64", mantissa_bits=52, max_exponent=1024),
}
# float8_e4m3fn spends its top exponent on finite values and has no infinity.
_KNOWN["float8_e5m2"] = _limits("float8_e5m2", mantissa_bits=2, max_exponent=16)
_KNOWN["float8_e4m3fn"] = DtypeLimits("float8_e4m3fn", 448.0, math.log(448.0), 2.0**-6)
_KNOWN["half"] = _KNOWN["float16"]
_KNOWN["complex64"] = _KNOWN["float32"]
_KNOWN["complex128"] = _KNOWN["float64"]

HALF_PRECISION = frozenset({"float16", "bfloat16"})


def dtype_limits(dtype: str) -> DtypeLimits:
    """Return the limits of a dtype, given by name.

    Integer, boolean and other non-floating dtypes never hold inf or NaN; for them
    the float32 limits are returned, since the values they feed are computed in
    float32 by default.

    Args:
        dtype: str, a dtype name such as "float32" or "bfloat16" (case-insensitive).

    Returns:
        The dtype's `DtypeLimits`.

    Raises:
        ValueError: for a floating-point dtype whose limits are not known here
            (e.g. "float8_e4m3b11fnuz").
    """
    key = dtype.strip().lower()
    if key in _KNOWN:
        return _KNOWN[key]
    if "float" in key or key.startswith("complex"):
        raise ValueError(
            f"`dtype` must be one of {sorted(_KNOWN)} or a non-floating dtype. "
            f"Received: dtype={dtype!r}. Add its limits to `dtype_limits.py`."
        )
    return _KNOWN["float32"]
