"""A softmax over a row whose every entry is -inf (a mask hiding every key): 0 / 0 = NaN."""

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

OPS = frozenset({"Softmax"})

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
    """Explain a softmax that wrote NaN from an input whose only non-finite values are
    -inf; decline any other softmax failure (a NaN it was handed, say)."""
    origin = evidence.origin
    if origin is None or evidence.phase != "forward" or not origin.inputs:
        return None
    scores = origin.inputs[0]
    if scores.nan or scores.pos_inf or not scores.neg_inf:
        return None
    if not any(stats.nan for stats in origin.outputs):
        return None
    framework = framework_of(evidence)
    producers = evidence.input_producers
    producer = producers[0] if producers else None
    written = ""
    if producer is not None and producer.source_kind == "op" and producer.source.code:
        name = producer.framework_op or producer.op
        written = f" The -inf were written by {name} at {quoted_line(producer.source)}."
    explanation = (
        f"{op_place(origin)}{at_step(evidence.step)} wrote {nonfinite_counts(origin)} from "
        f"an input whose only non-finite values were {count(scores.neg_inf, '-inf value')}: "
        "some of its rows are -inf in every entry, a mask that hides every key of a query "
        "(an empty or all-padding sequence). A softmax maps -inf to 0 in a row that keeps "
        "one finite entry, but a row with none is 0 / 0, NaN in the forward pass and in "
        f"the gradient.{written}"
    )
    fix = finite_mask(producer, framework) or Fix(
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
