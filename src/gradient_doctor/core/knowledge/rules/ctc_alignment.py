"""CTC's loss of a target that no alignment to its input frames can spell: infinite.

CTC's loss is -log of the probability summed over every alignment of a target's labels
to its input's frames. An alignment needs a frame per label, and one more between two
equal labels in a row (the blank that keeps them apart), so a target longer than its
input (after a convolution or pooling shortened the frames, say) has none: its
probability is 0 and its loss inf, for any logits. No update can change that; PyTorch's
`zero_infinity=True` makes such an example's loss and gradient zero, and a filter on the
lengths keeps it out of the batch.
"""

from __future__ import annotations

import dataclasses
import linecache

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Edit, Fix, NotFix, TensorStats
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import framework_of, source_code, source_focus
from gradient_doctor.core.knowledge.source.calls import find_call, parses, replace_span
from gradient_doctor.core.knowledge.wording import at_step, count, format_number, op_place

OPS = frozenset({"CtcLoss"})
_TITLE = "Give an example that no alignment can spell a loss of 0 (zero_infinity=True)"
# `input_lengths` and `target_lengths` are the call's third and fourth tensors.
_INPUT_LENGTHS, _TARGET_LENGTHS = 2, 3
_FILTER = (
    "# before the loss: keep the examples whose input has at least as many frames as\n"
    "# their target has labels (one more for each repeated label in a row)\n"
    "keep = input_lengths >= target_lengths"
)


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain a CTC loss that came out infinite from finite log-probabilities."""
    origin = evidence.origin
    if origin is None or evidence.phase != "forward" or not origin.inputs:
        return None
    if not origin.inputs[0].finite:
        return None
    infinite = sum(stats.pos_inf or stats.inf for stats in origin.outputs[:1])
    examples = origin.outputs[0].size if origin.outputs else 0
    which = (
        f"{count(infinite, 'example')} of the batch's {examples}"
        if infinite and examples > 1
        else "an example"
    )
    explanation = (
        f"{op_place(origin)}{at_step(evidence.step)} gave {which} an infinite loss from "
        "finite log-probabilities. CTC's loss is -log of the probability summed over every "
        "alignment of a target's labels to its input's frames; an alignment needs a frame "
        "per label (one more between two equal labels in a row), so a target longer than "
        f"its input has none: probability 0, loss inf, for any logits.{_lengths(origin)}"
    )
    fixes = [_zero_infinity(evidence), Fix("clean_input", "Leave such examples out", _FILTER)]
    return Diagnosis(
        category="forward_domain",
        explanation=explanation,
        not_fixes=_NOT_FIXES,
        fixes=tuple(fix for fix in fixes if fix is not None),
    )


def _lengths(origin) -> str:
    """What the lengths held, when the call passed them as tensors."""
    if len(origin.inputs) <= _TARGET_LENGTHS:
        return ""
    frames, labels = origin.inputs[_INPUT_LENGTHS], origin.inputs[_TARGET_LENGTHS]
    if None in (frames.min, frames.max, labels.min, labels.max):
        return ""
    said = f" Here the inputs had {_span(frames)} frames and the targets {_span(labels)} labels"
    if frames.min < labels.min:
        return f"{said}: an input of {format_number(frames.min)} frames holds no target."
    if frames.min < labels.max:
        return f"{said}: a short input cannot hold a long target."
    return f"{said} (so repeated labels made a target too long)."


def _span(stats: TensorStats) -> str:
    """ "3 to 20", or "7" when every value is the same."""
    low, high = format_number(stats.min), format_number(stats.max)
    return low if low == high else f"{low} to {high}"


def _zero_infinity(evidence: Evidence) -> Fix | None:
    """`zero_infinity=True` on the user's `ctc_loss(...)` call, or on the one line of the
    origin's file that builds the `CTCLoss` module the call ran; PyTorch only."""
    if framework_of(evidence) != "torch":
        return None
    code = source_code(evidence)
    call = find_call(code, ("ctc_loss",), source_focus(evidence))
    if call is not None:
        return _with_keyword(code, call, None)
    source = evidence.origin.source
    if source is None:
        return None
    built = [
        (number, line.strip())
        for number, line in enumerate(linecache.getlines(source.file), 1)
        if find_call(line.strip(), ("CTCLoss",)) is not None
    ]
    if len(built) != 1:
        return None
    number, line = built[0]
    return _with_keyword(line, find_call(line, ("CTCLoss",)), (source.file, number))


def _with_keyword(code: str, call, place: tuple[str, int] | None) -> Fix | None:
    """The call on `code` with `zero_infinity=True`: a rewrite of the origin's line, or
    an edit of the line at `place`."""
    keywords = dict(call.kwargs)
    if keywords.get("zero_infinity", "").strip() == "True":
        return None
    kwargs = tuple((k, v) for k, v in call.kwargs if k != "zero_infinity")
    with_keyword = dataclasses.replace(call, kwargs=(*kwargs, ("zero_infinity", "True")))
    rewritten = replace_span(code, call.start, call.end, with_keyword.render(call.args))
    if parses(code) and not parses(rewritten):
        return None
    if place is None:
        return Fix("skip_nonfinite_batch", _TITLE, rewritten, rewrite=(rewritten,))
    file, line = place
    edit = Edit(file, line, line, (rewritten,), (code,))
    return Fix("skip_nonfinite_batch", _TITLE, rewritten, edits=(edit,))


_NO_UPDATE = (
    "the loss is infinite for any logits, since no alignment of the target exists: no "
    "update of the weights can change it."
)
_NOT_FIXES = (
    NotFix("gradient_clipping", "Clipping acts on gradients, and " + _NO_UPDATE, structural=True),
    NotFix("lower_learning_rate", "A smaller update cannot help: " + _NO_UPDATE, structural=True),
    NotFix(
        "larger_batch",
        "A larger batch computes each example's loss the same way: the example with no "
        "alignment is inf in a batch of any size.",
        structural=True,
    ),
)
