"""A negative log-likelihood averaged over a batch in which no target counts: 0 / 0.

PyTorch's `cross_entropy` and `nll_loss` (reduction "mean", the default) sum the loss of
the targets that count and divide by how many count (by their total class weight, with
`weight=`); a target equal to `ignore_index` (-100 by default: the padding of a sequence,
a masked label) does not count. A batch whose every target is ignored (a batch of padding
alone, the last short batch of a language model's stream) divides 0 by 0: the loss is
NaN from finite logits, and its gradients are NaN with it. No weight decides which
targets a batch ignores: the learning rate and clipping cannot help, and the batch's
loss has nothing to learn from. Dividing the summed loss by the count, kept at least 1,
makes such a batch's loss 0, its gradients 0; skipping it does the same.
"""

from __future__ import annotations

import dataclasses

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Fix, NotFix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import framework_of, source_code, source_focus
from gradient_doctor.core.knowledge.source.calls import find_call, parses, replace_span
from gradient_doctor.core.knowledge.wording import at_step, format_number, op_place

OPS = frozenset({"NllLoss"})
# The torch functions whose mean is the one that divides by the targets that count.
_CALLS = ("cross_entropy", "nll_loss")
_DEFAULT_IGNORE = "-100"
_SKIP = (
    "# skip a batch in which no target counts: it has nothing to learn from\n"
    "if (labels != IGNORE).any():\n"
    "    loss.backward()\n"
    "    optimizer.step()"
)


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain a negative log-likelihood's NaN from finite log-probabilities when every
    target of the batch held one value (the ignored one); else decline."""
    origin = evidence.origin
    if origin is None or evidence.phase != "forward" or len(origin.inputs) < 2:
        return None
    scores, targets = origin.inputs[0], origin.inputs[1]
    if not scores.finite or not targets.dtype.startswith(("int", "uint")):
        return None
    if targets.min is None or targets.min != targets.max:
        return None
    if not any(stats.nan for stats in origin.outputs[:1]):
        return None
    value = format_number(targets.min)
    explanation = (
        f"{op_place(origin)}{at_step(evidence.step)} wrote NaN from finite "
        'log-probabilities: averaged over the batch (reduction "mean"), the negative '
        "log-likelihood sums the loss of the targets that count and divides by how many "
        f"count, and every one of this batch's {targets.size} targets was {value}"
        + (" (the default ignore_index)" if value == _DEFAULT_IGNORE else "")
        + ", a target that does not count: 0 / 0 is NaN. A batch of padding alone, or of "
        "masked labels only, has nothing to learn from; no weight decides which targets "
        "a batch ignores."
    )
    fixes = [
        _counted_mean(evidence, value),
        Fix(
            "skip_nonfinite_batch",
            "Skip a batch in which no target counts",
            _SKIP.replace("IGNORE", value),
        ),
    ]
    return Diagnosis(
        category="forward_domain",
        explanation=explanation,
        not_fixes=_NOT_FIXES,
        fixes=tuple(fix for fix in fixes if fix is not None),
    )


def _counted_mean(evidence: Evidence, ignored: str) -> Fix | None:
    """The user's `cross_entropy(...)` / `nll_loss(...)` call summed and divided by the
    count of targets that count, kept at least 1 (PyTorch; a call with class weights,
    whose mean divides by their total, or another reduction, is left alone)."""
    if framework_of(evidence) != "torch":
        return None
    code = source_code(evidence)
    call = find_call(code, _CALLS, source_focus(evidence))
    if call is None or len(call.args) < 2:
        return None
    keywords = dict(call.kwargs)
    if "weight" in keywords or keywords.get("reduction", '"mean"').strip("'\"") != "mean":
        return None
    ignore = keywords.get("ignore_index", _DEFAULT_IGNORE)
    if ignore != ignored and ignore.lstrip("-").isdigit():
        return None  # the call ignores another value: its targets were not all ignored
    kwargs = tuple((k, v) for k, v in call.kwargs if k != "reduction")
    summed = dataclasses.replace(call, kwargs=(*kwargs, ("reduction", '"sum"')))
    target = call.args[1]
    divided = f"({summed.render(call.args)} / ({target} != {ignore}).sum().clamp(min=1))"
    rewritten = replace_span(code, call.start, call.end, divided)
    if parses(code) and not parses(rewritten):
        return None
    return Fix(
        "safe_div",
        "Average over the targets that count, at least one (a batch with none: loss 0)",
        rewritten,
        rewrite=(rewritten,),
    )


_NO_WEIGHT = (
    "which targets a batch ignores is the data's: every target of the batch was ignored, "
    "so its mean is 0 / 0 whatever the weights are."
)
_NOT_FIXES = (
    NotFix("gradient_clipping", "Clipping acts on gradients, and " + _NO_WEIGHT, structural=True),
    NotFix("lower_learning_rate", "No smaller update can help: " + _NO_WEIGHT, structural=True),
)
