"""Read the few facts rules need from an `Evidence`: the line, the dtype, the extremes."""

from __future__ import annotations

from gradient_doctor.core.dtype_limits import DtypeLimits, dtype_limits
from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Origin, TensorStats


def framework_of(evidence: Evidence) -> str:
    """The framework the user trains with, "tf" or "torch": the remedies are spelled in it."""
    if evidence.path_break is not None and evidence.path_break.framework == "torch":
        return "torch"
    return evidence.setup.framework


def source_code(evidence: Evidence) -> str:
    """The user's line that created the origin op, or "" when none is known."""
    origin = evidence.origin
    return origin.source.code.strip() if origin and origin.source else ""


def source_focus(evidence: Evidence) -> tuple[int, int] | None:
    """Where on the user's line the origin op was made (to pick one of several calls)."""
    origin = evidence.origin
    return origin.source.span if origin and origin.source else None


def origin_dtype(origin: Origin) -> str:
    """The dtype the op computed in: its first output's, else its first input's."""
    for stats in origin.outputs + origin.inputs:
        return stats.dtype
    return "float32"


def limits_of(origin: Origin) -> DtypeLimits:
    """The numeric limits of the op's dtype; float32's for an exotic dtype.

    A diagnosis must not fail on a dtype whose limits are not tabulated; the
    explanation still names the op's own dtype.
    """
    try:
        return dtype_limits(origin_dtype(origin))
    except ValueError:
        return dtype_limits("float32")


def input_at(origin: Origin, index: int) -> TensorStats | None:
    """The op's input number `index`, or None when it has fewer inputs."""
    return origin.inputs[index] if index < len(origin.inputs) else None


def largest_magnitude(stats: TensorStats | None) -> float | None:
    """The largest |value| among a tensor's finite values, or None when unknown."""
    return None if stats is None else stats.largest_magnitude


def outputs_inf(origin: Origin) -> bool:
    """True when some output of the op holds an infinity."""
    return any(stats.inf for stats in origin.outputs)
