"""The knowledge base's answer for one failing step: category, explanation, remedies."""

from __future__ import annotations

from dataclasses import dataclass, replace

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import (
    CATEGORIES,
    FIX_FAMILIES,
    BreakPoint,
    Disconnected,
    Finding,
    Fix,
    NotFix,
)


@dataclass(frozen=True)
class Diagnosis:
    """Why a step went non-finite, what will not help, and what will.

    Attributes:
        category: one of `CATEGORIES`.
        explanation: one to three plain sentences with the actual values.
        not_fixes: common remedies that will not help, each with the reason.
        fixes: remedies with code that fits the user's line, most specific first.

    Raises:
        ValueError: when the category, a fix family or a not-fix remedy is not a
            known id (see `core/findings.py`).
    """

    category: str
    explanation: str
    not_fixes: tuple[NotFix, ...]
    fixes: tuple[Fix, ...]

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(
                f"`category` must be one of {CATEGORIES}. Received: category={self.category!r}"
            )
        ids = [fix.family for fix in self.fixes] + [item.remedy for item in self.not_fixes]
        unknown = [name for name in ids if name not in FIX_FAMILIES]
        if unknown:
            raise ValueError(
                f"Fix families must be ids from FIX_FAMILIES. Received: {unknown}. "
                "Add a new id to FIX_FAMILIES in core/findings.py first."
            )

    def finding(self, evidence: Evidence) -> Finding:
        """The report's finding for `evidence` with this diagnosis (the disconnected
        variables and where their path breaks included)."""
        path_break = evidence.path_break
        origin, phase = evidence.origin, evidence.phase
        made = evidence.pipeline.evidence.origin if evidence.pipeline is not None else None
        if made is not None and (origin is None or _batch_was_bad(evidence)):
            # The batch's NaN was made there. The step's own first op that wrote a
            # non-finite value from finite inputs is downstream of it (a max-pool turns
            # NaN into float32's lowest value, and a convolution of those overflows).
            origin, phase = replace(made, source_kind="input_pipeline"), None
        return Finding(
            category=self.category,
            step=evidence.step,
            phase=phase,
            origin=origin,
            explanation=self.explanation,
            not_fixes=self.not_fixes,
            fixes=self.fixes,
            disconnected=None
            if path_break is None
            else Disconnected(
                variables=path_break.variables,
                all=evidence.all_disconnected and evidence.path_breaks == 1,
                break_point=None
                if path_break.node is None
                else BreakPoint(path_break.node.op_type, path_break.node.source),
            ),
            skipped_updates=evidence.skipped_updates,
            own_update=evidence.setup.own_update,
            broken_before=evidence.broken_state is not None or evidence.update_overflow is not None,
        )


def _batch_was_bad(evidence: Evidence) -> bool:
    """The batch held non-finite values its pipeline made (the diagnosis is of those)."""
    return bool(evidence.bad_inputs) and evidence.broken_state is None
