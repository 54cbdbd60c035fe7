"""Fit a diagnosis to the data it ran on: unscaled targets and input features come first.

Rules explain the op that went non-finite; when the batch's features are far from unit
scale (areas in m², prices, raw pixel values), the first layers' outputs and gradients
are that large too, and when its regression targets are (prices in dollars), the loss
and its gradient are: a squared error starts near the targets' square, and its gradient
grows with the error. Standardising them removes the cause the other remedies only work
around. This pass says so and puts those remedies first, the targets' before the features',
but for gradients that grew step after step, where the features' come first.
"""

from __future__ import annotations

from dataclasses import replace

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.remedies import fixes as remedies
from gradient_doctor.core.knowledge.wording import format_number

# Features past this magnitude are not standardised (standardised ones are a few units).
UNSCALED = 100.0
# Regression targets past this magnitude are far from unit scale: a squared error of
# targets in the hundreds (ages, temperatures, 8-bit pixels an autoencoder rebuilds) is
# one Adam trains on, of prices in dollars (1e5) one whose gradients throw the weights.
UNSCALED_TARGETS = 1000.0
# Problems of a growth over steps, which the features' scale drives (the curvature).
_GROWTH = frozenset({"exploding_gradients"})
# Problems unscaled data drives: values or gradients too large.
_NUMERIC = frozenset(
    {"forward_overflow", "exploding_gradients", "backward_singularity", "forward_domain"}
)


def unscaled(evidence: Evidence) -> bool:
    """True when the batch's input features reach past `UNSCALED`."""
    return evidence.input_scale is not None and evidence.input_scale[1] > UNSCALED


def unscaled_targets(evidence: Evidence) -> bool:
    """True when the batch's regression targets reach past `UNSCALED_TARGETS`."""
    return evidence.target_scale is not None and evidence.target_scale.largest > UNSCALED_TARGETS


def fit_to_data(diagnosis: Diagnosis, evidence: Evidence) -> Diagnosis:
    """`diagnosis` with the data remedies first (and said why) when the data is unscaled:
    `normalize_target` for the targets, `normalize_input` for the features.

    Left alone for problems unscaled data does not drive, for data the batch itself
    carried as NaN (bad input), and when the rule already ranks the data remedy first.
    """
    if diagnosis.category not in _NUMERIC:
        return diagnosis
    framework = evidence.setup.framework
    if unscaled(evidence) and unscaled_targets(evidence) and diagnosis.category in _GROWTH:
        return _targets_then_features(_features_first(diagnosis, evidence), evidence)
    if unscaled(evidence):
        name, scale = evidence.input_scale
        # A name (`x`), or where the features were read ("read at train.py:42").
        shown = name if name.startswith("read") else f"`{name}`"
        diagnosis = _first(
            diagnosis,
            remedies.normalize_input(framework),
            f" The input {shown} reaches {format_number(scale)}: features that far from "
            "unit scale make the first layers' outputs and gradients that large.",
        )
    if unscaled_targets(evidence):
        target = evidence.target_scale
        spread = (
            f" (mean {format_number(target.mean)}, std {format_number(target.std)} in this batch)"
            if target.mean is not None and target.std is not None
            else ""
        )
        diagnosis = _first(
            diagnosis,
            remedies.normalize_target(framework),
            f" The targets {target.tensor} reach {format_number(target.largest)}{spread}: "
            "a regression loss starts near the size of the targets (a squared error near "
            "its square) and its gradient grows with the error, so the loss and the first "
            "updates are as far from unit scale as the targets are.",
        )
    return diagnosis


def _features_first(diagnosis: Diagnosis, evidence: Evidence) -> Diagnosis:
    """Gradients that grew step after step with both the features and the targets
    unscaled: the features set the loss's curvature, which decides whether a step of
    the rate overshoots (the targets only set where the loss starts), so standardising
    the targets alone leaves the growth (prices and a year column: inf at the same
    step); the features' fix comes first, the targets' second."""
    name, scale = evidence.input_scale
    shown = name if name.startswith("read") else f"`{name}`"
    return replace(
        diagnosis,
        explanation=diagnosis.explanation
        + f" The input {shown} reaches {format_number(scale)}: the loss's curvature grows "
        "with the features' square, so every update of this rate overshoots, further each "
        "step; standardise the features first (the targets alone leave it growing).",
    )


def _targets_then_features(diagnosis: Diagnosis, evidence: Evidence) -> Diagnosis:
    framework = evidence.setup.framework
    target = evidence.target_scale
    diagnosis = _first(
        diagnosis,
        remedies.normalize_target(framework),
        f" The targets {target.tensor} reach {format_number(target.largest)} too: "
        "standardise them as well, so that the loss starts near unit scale.",
    )
    return _first(diagnosis, remedies.normalize_input(framework), "")


def _first(diagnosis: Diagnosis, fix, note: str) -> Diagnosis:
    """`diagnosis` with `fix` first (the rule's own of its family, when it has one) and
    `note` added to its explanation."""
    fixes = [f for f in diagnosis.fixes if f.family != fix.family]
    existing = [f for f in diagnosis.fixes if f.family == fix.family]
    fixes.insert(0, existing[0] if existing else fix)
    return replace(diagnosis, fixes=tuple(fixes), explanation=diagnosis.explanation + note)


# Reductions whose value depends on which examples the batch holds when taken over it:
# a per-batch mean, spread or norm (a column that is constant in a small batch has std 0).
_BATCH_STATISTICS = frozenset(
    {"Std", "Var", "StdMean", "VarMean", "Mean", "Sum", "Moments", "EuclideanNorm", "Max", "Min"}
)


def fit_to_batch_statistics(diagnosis: Diagnosis, evidence: Evidence) -> Diagnosis:
    """`diagnosis` without the expectation that a larger batch will not help when the
    failing op read a reduction (a per-batch statistic): a batch of another size holds
    other examples, and the statistic changes with them (a binary column constant in 32
    rows is not in 512)."""
    if not any(p is not None and p.op in _BATCH_STATISTICS for p in evidence.input_producers):
        return diagnosis
    not_fixes = tuple(
        item
        for item in diagnosis.not_fixes
        if not (item.remedy == "larger_batch" and not item.structural)
    )
    return replace(diagnosis, not_fixes=not_fixes)
