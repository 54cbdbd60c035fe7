"""The knowledge base's answer for one failing step: category, explanation, remedies."""

from __future__ import annotations

from dataclasses import dataclass

from gradient_doctor.core.findings import CATEGORIES, FIX_FAMILIES, Fix, NotFix


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
