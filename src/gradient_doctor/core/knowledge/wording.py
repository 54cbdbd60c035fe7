"""Pure functions that turn numbers, counts and places into the words explanations use."""

from __future__ import annotations

import math
from collections.abc import Sequence

from gradient_doctor.core.findings import Origin


def format_number(value: float | None) -> str:
    """Format a value compactly: 712.4, 88.72, 65504, 3.4e+38, 1e-12, inf, NaN.

    Args:
        value: float or None; None reads "unknown".

    Returns:
        At most four significant digits between 1e-3 and 1e5, two in exponent
        notation outside that range; whole numbers below 1e6 are written out.
    """
    if value is None:
        return "unknown"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    magnitude = abs(value)
    if value == int(value) and magnitude < 1e6:
        return str(int(value))
    if 1e-3 <= magnitude < 1e5:
        return f"{value:.4g}"
    return f"{value:.2g}"


def count(number: int, noun: str) -> str:
    """Return "1 value" or "17 values" (the noun is made plural with an "s")."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def listing(items: Sequence[object], limit: int = 5) -> str:
    """Return "4, 17 and 20", or "4, 17, 20, 31, 40 and 12 more" past `limit`."""
    shown = [str(item) for item in items[:limit]]
    if len(items) > limit:
        return f"{', '.join(shown)} and {len(items) - limit} more"
    if len(shown) < 2:
        return "".join(shown)
    return f"{', '.join(shown[:-1])} and {shown[-1]}"


def at_step(step: int | None) -> str:
    """Return " at step 57", or "" when the step is unknown."""
    return "" if step is None else f" at step {step}"


def op_place(origin: Origin) -> str:
    """Name an op and where it ran: "Exp in layer `message_passing`"."""
    return f"{origin.op} in layer `{origin.layer}`" if origin.layer else origin.op


def nonfinite_counts(origin: Origin) -> str:
    """Describe the non-finite values an op wrote: "17 inf and 3 NaN values"."""
    nan = sum(stats.nan for stats in origin.outputs)
    inf = sum(stats.inf for stats in origin.outputs)
    parts = [f"{inf} inf" if inf else "", f"{nan} NaN" if nan else ""]
    words = " and ".join(part for part in parts if part)
    return f"{words} {'value' if nan + inf == 1 else 'values'}" if words else "non-finite values"
