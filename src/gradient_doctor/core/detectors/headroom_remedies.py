"""The fixes and not-fixes of a headroom warning: the knowledge base's diagnosis of the
failure the warning forecasts.

A warning borrows the remedies the doctor would propose once the op reached its limit,
so warnings and problems share one knowledge base (no second copy of the snippets).
"""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence, TrainingSetup
from gradient_doctor.core.findings import Fix, NotFix, Origin, SourceLine, TensorStats
from gradient_doctor.core.knowledge import diagnose
from gradient_doctor.core.records import HeadroomSample


def source_of(sample: HeadroomSample) -> SourceLine | None:
    """The user's line that created the op, or None when the adapter did not find it."""
    if sample.file is None or sample.line is None:
        return None
    return SourceLine(sample.file, sample.line, sample.code or "")


def projected_evidence(sample: HeadroomSample, setup: TrainingSetup | None = None) -> Evidence:
    """The evidence of the step at which the op's input reaches its limit, in the
    training `setup` when known (its framework spells the fixes).

    The input is placed at the limit and the output made non-finite the way the
    kind fails: an infinity for an overflow, a NaN for a domain error. Every input
    slot holds the same statistics, so rules that read the second input (the
    denominator of a division, the y of xlogy) find it.
    """
    at_limit = TensorStats(
        sample.dtype,
        (),
        min=sample.limit,
        max=sample.limit,
        nan=0,
        inf=0,
        zeros=int(sample.limit == 0),
        size=1,
        min_abs=abs(sample.limit),
    )
    overflow = sample.kind in ("max_input", "max_abs_value")
    failed = TensorStats(
        sample.dtype,
        (),
        None,
        None,
        nan=0 if overflow else 1,
        inf=1 if overflow else 0,
        zeros=0,
        size=1,
    )
    origin = Origin(
        op=sample.op,
        op_name=sample.key,
        layer=sample.layer,
        source=source_of(sample),
        gradient_of=None,
        inputs=(at_limit, at_limit),
        outputs=(failed,),
    )
    return Evidence(
        step=None,
        phase="forward",
        origin=origin,
        reduction_axis=sample.reduction_axis,
        setup=setup if setup is not None else TrainingSetup(),
    )


def headroom_remedies(
    sample: HeadroomSample, setup: TrainingSetup | None = None
) -> tuple[tuple[Fix, ...], tuple[NotFix, ...]]:
    """The fixes and not-fixes the knowledge base gives for the forecast failure.

    Args:
        sample: the op's latest `HeadroomSample`.
        setup: the user's training setup, or None (unknown: TensorFlow's spelling).

    Returns:
        (fixes, not_fixes), most specific fix first.
    """
    diagnosis = diagnose(projected_evidence(sample, setup))
    return diagnosis.fixes, diagnosis.not_fixes
