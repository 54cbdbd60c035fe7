"""Pure functions that turn numbers, counts and places into the words explanations use."""

from __future__ import annotations

import math
from collections.abc import Sequence

from gradient_doctor.core.evidence import OpCall
from gradient_doctor.core.findings import Origin, SourceLine, TensorStats


def format_number(value: float | None, digits: int = 4) -> str:
    """Format a value compactly: 712.4, 88.72, 65504, 3.4e+38, 1e-12, inf, NaN.

    Args:
        value: float or None; None reads "unknown".
        digits: int, significant digits between 1e-3 and 1e5; raise it to show how
            far a value such as 1.0000001 lies past a boundary. Defaults to 4.

    Returns:
        `digits` significant digits between 1e-3 and 1e5, two in exponent notation
        outside that range; whole numbers below 1e5 are written out.
    """
    if value is None:
        return "unknown"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    magnitude = abs(value)
    if value == int(value) and magnitude < 1e5:
        return str(int(value))
    if 1e-3 <= magnitude < 1e5:
        return f"{value:.{digits}g}"
    return f"{value:.2g}"


def replica_note(replica: int, replicas: int | None) -> str:
    """Say which replica of a `tf.distribute` run saw the first non-finite value."""
    of = f" of {replicas}" if replicas else ""
    return (
        f"Replica {replica}{of} saw the first non-finite value; the gradient all-reduce "
        "would have spread it to every replica, so the update was skipped on all of them."
    )


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


def line_ref(source: SourceLine) -> str:
    """Point at a user's line: "train.py:141"."""
    return f"{source.file}:{source.line}"


def quoted_line(source: SourceLine) -> str:
    """Point at a user's line and quote it: "train.py:141 `tokens = tf.argmax(logits)`"."""
    return f"{line_ref(source)} `{source.code.strip()}`"


def op_place(origin: Origin, op: str | None = None) -> str:
    """Name an op and where it ran: "Exp in layer `message_passing`".

    Args:
        origin: the op's `Origin`.
        op: str, the name to use instead of the op's own as the user's framework names
            it (`reported_op`), e.g. the forward op's.
    """
    name = op or origin.reported_op
    return f"{name} in layer `{origin.layer}`" if origin.layer else name


def explain_input(origin: Origin, step: int | None, subject: str, reached: str, rule: str) -> str:
    """The one template for "an input went out of range" explanations.

    Example: "The input to Exp in layer `mp` at step 57 reached 712.4; float32 exp
    overflows above 88.72, so Exp wrote 17 inf values."

    Args:
        origin: the op's `Origin`.
        step: int or None, the failing step.
        subject: str, e.g. "The input to" or "The denominator of".
        reached: str, the value reached, already formatted.
        rule: str, the limit or domain that value broke.
    """
    where = f"{op_place(origin)}{at_step(step)}"
    return (
        f"{subject} {where} reached {reached}; {rule}, "
        f"so {origin.reported_op} wrote {nonfinite_counts(origin)}."
    )


def from_data_note(weights_upstream: bool | None) -> str:
    """ " Its input comes from the batch alone ..." when no weight lies in between, else ""."""
    if weights_upstream is not False:
        return ""
    return (
        " Its input comes from the batch alone (no trainable weight lies in between): "
        "the data itself carries this value."
    )


def growth_note(growth: tuple[str | None, str, float] | None, blowup: Sequence[OpCall] = ()) -> str:
    """ " The values first grew past 1e6 in layer `x` ..." when the replay saw where,
    with the user's line of that op when `blowup` (`Evidence.forward_blowup`) has it."""
    if growth is None:
        return ""
    layer, op, reached = growth
    where = f"in layer `{layer}` ({op})" if layer else f"at {op}"
    if blowup and blowup[0].op == op and not layer:
        where += f" ({blowup[0].source.file}:{blowup[0].source.line})"
    return (
        f" The values first grew past 1e6 {where}, up to {format_number(reached)}: "
        f"the overflow began there.{other_blowups(blowup)}"
    )


def other_blowups(blowup: Sequence[OpCall]) -> str:
    """ " 1 more Exp call of the step went past 1e6 too (line 42)." for the calls of a
    forward blow-up's op after its first (`Evidence.forward_blowup`); else ""."""
    others = blowup[1:]
    if not others:
        return ""
    lines = ", ".join(f"line {call.source.line}" for call in others)
    plural = "s" if len(others) > 1 else ""
    return (
        f" {len(others)} more {blowup[0].op} call{plural} of the step went past 1e6 too ({lines})."
    )


def value_range(stats: Sequence[TensorStats]) -> str:
    """Describe the finite values of some tensors: "from -3.1 to 712.4 (float32)"."""
    lows = [s.min for s in stats if s.min is not None]
    highs = [s.max for s in stats if s.max is not None]
    if not lows or not highs:
        return "with no finite values"
    dtype = stats[0].dtype
    return f"from {format_number(min(lows))} to {format_number(max(highs))} ({dtype})"


# An overshoot past a boundary below this is taken for rounding (`rounding_note`).
ROUNDING_OVERSHOOT = 1e-5


def rounding_note(overshoot: float) -> str:
    """A clause for a value just past a boundary, which usually comes from rounding: by
    less than `ROUNDING_OVERSHOOT`, a few dozen float32 roundings of values near 1 (a
    log's input 7.5e-4 below 0, 1 + t with t below -1, is some 6000 of them: a value
    that really crossed)."""
    if 0 < overshoot < ROUNDING_OVERSHOOT:
        return " (an overshoot this small usually comes from rounding)"
    return ""


def nonfinite_counts(origin: Origin) -> str:
    """Describe the non-finite values an op wrote: "17 inf and 3 NaN values"."""
    nan = sum(stats.nan for stats in origin.outputs)
    inf = sum(stats.inf for stats in origin.outputs)
    parts = [f"{inf} inf" if inf else "", f"{nan} NaN" if nan else ""]
    words = " and ".join(part for part in parts if part)
    return f"{words} {'value' if nan + inf == 1 else 'values'}" if words else "non-finite values"


def nonfinite_kind(origin: Origin) -> str:
    """The one kind of non-finite value an op wrote: "NaN", "inf" or "-inf"; "non-finite
    value" when it wrote several kinds, or none is counted (an inf whose sign is not
    counted is "inf")."""
    nan = sum(stats.nan for stats in origin.outputs)
    inf = sum(stats.inf for stats in origin.outputs)
    negative = sum(stats.neg_inf for stats in origin.outputs)
    if nan and not inf:
        return "NaN"
    if nan or not inf or 0 < negative < inf:
        return "non-finite value"
    return "-inf" if negative == inf else "inf"


def approximately(value: float, significant: int = 2) -> str:
    """Format a rate or ratio rounded to a few significant digits: 740, 26, 0.98, 1.2e-06.

    Unlike `format_number(value, digits=2)`, whole numbers up to 1e5 are written out
    (740, not 7.4e+02).

    Args:
        value: float, the value to round.
        significant: int, the significant digits kept. Defaults to 2.
    """
    if not math.isfinite(value):
        return format_number(value)
    return format_number(float(f"{value:.{significant}g}"))
