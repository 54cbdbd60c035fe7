"""A softmax, log-softmax or log-sum-exp over a row whose every entry is -inf (a mask hiding
every key, or every action): 0 / 0 or -inf - -inf = NaN."""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Fix, NotFix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import framework_of
from gradient_doctor.core.knowledge.rewrites.finite_mask import TITLE, finite_mask
from gradient_doctor.core.knowledge.wording import (
    at_step,
    count,
    nonfinite_counts,
    op_place,
    quoted_line,
)

OPS = frozenset({"Softmax", "LogSoftmax", "Logsumexp"})
# What each op makes of a row with no finite entry, and what follows from it.
_ROW_WITH_NONE = {
    "Softmax": (
        "A softmax maps -inf to 0 in a row that keeps one finite entry, but a row with "
        "none is 0 / 0, NaN in the forward pass and in the gradient."
    ),
    "LogSoftmax": (
        "A log-softmax keeps -inf for a masked entry of a row that keeps one finite entry, "
        "but a row with none is -inf - -inf, NaN in the forward pass and in the gradient."
    ),
    "Sub": (
        "Subtracting a row's log-sum-exp from it (scores - logsumexp(scores), as "
        "torch.distributions.Categorical(logits=...) and a hand-written log-softmax do) "
        "leaves -inf for a masked entry of a row that keeps one finite entry, but in a row "
        "with none the log-sum-exp is -inf too, and -inf - -inf is NaN."
    ),
    "Mul": (
        "A masked entry's -inf weighted by 0 (its probability, in an entropy's p * log p) "
        "is 0 * -inf, NaN, in the forward pass and in the gradient."
    ),
    "Logsumexp": (
        "A log-sum-exp of a row that keeps one finite entry is finite, but of a row with "
        "none it is -inf, and the log-probabilities made from it (scores - logsumexp, as "
        "torch.distributions.Categorical(logits=...) normalises them) are -inf - -inf, NaN."
    ),
}

# No mask fill of the user's to rewrite: the fill as it should be written, and, for a
# library's attention that fills the mask itself, a mask that leaves each row a key.
_GENERIC = {
    "torch": (
        "scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)  # not -inf\n"
        "# with nn.MultiheadAttention or F.scaled_dot_product_attention (the fill is\n"
        "# theirs): leave each sequence one key, or drop the sequences with none\n"
        "key_padding_mask[key_padding_mask.all(dim=1), 0] = False"
    ),
    "tf": (
        "scores = tf.where(keep, scores, scores.dtype.min)  # not float('-inf')\n"
        "# with keras.layers.MultiHeadAttention (the fill is its own): leave each\n"
        "# query one key it may attend to, or drop the sequences with none"
    ),
}


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain a softmax (log-softmax, log-sum-exp) that wrote NaN (a log-sum-exp: -inf)
    from an input whose only non-finite values are -inf, or arithmetic that met a mask's
    -inf (`op_trace.MEETS_A_MASK`, called by the arithmetic's own rule); decline any
    other failure (a NaN it was handed, say)."""
    origin = evidence.origin
    if origin is None or evidence.phase != "forward" or not origin.inputs:
        return None
    if any(stats.nan or stats.pos_inf for stats in origin.inputs):
        return None
    index = next((i for i, stats in enumerate(origin.inputs) if stats.neg_inf), None)
    if index is None:
        return None
    scores = origin.inputs[index]
    own = (
        any(stats.nan or stats.neg_inf for stats in origin.outputs)
        if origin.op == "Logsumexp"
        else any(stats.nan for stats in origin.outputs)
    )
    if not own:
        return None
    framework = framework_of(evidence)
    producers = evidence.input_producers
    producer = producers[index] if index < len(producers) else None
    written = ""
    if producer is not None and producer.source_kind == "op" and producer.source.code:
        name = producer.framework_op or producer.op
        written = f" The -inf were written by {name} at {quoted_line(producer.source)}."
    explanation = (
        f"{op_place(origin)}{at_step(evidence.step)} wrote {nonfinite_counts(origin)} from "
        f"an input whose only non-finite values were {count(scores.neg_inf, '-inf value')}: "
        "some of its rows are -inf in every entry, a mask that hides every key of a query "
        "(an empty or all-padding sequence), or every action of a state. "
        f"{_ROW_WITH_NONE.get(origin.op, _ROW_WITH_NONE['Softmax'])}{written}"
    )
    fix = finite_mask(producer, framework, scores.dtype) or Fix(
        "finite_mask", TITLE, _GENERIC.get(framework, _GENERIC["tf"])
    )
    return Diagnosis(
        category="forward_domain",
        explanation=explanation,
        not_fixes=_not_fixes(framework),
        fixes=(fix,),
    )


def _not_fixes(framework: str) -> tuple[NotFix, ...]:
    clip = "torch.nn.utils.clip_grad_norm_" if framework == "torch" else "clipping"
    return (
        NotFix(
            "gradient_clipping",
            f"The NaN is made in the forward pass, before any gradient exists; {clip} of "
            "the NaN gradients that follow gives NaN.",
        ),
        NotFix(
            "lower_learning_rate",
            "Which rows are masked entirely is set by the mask, not by a weight: a smaller "
            "learning rate is expected not to change them.",
            structural=False,
        ),
    )
