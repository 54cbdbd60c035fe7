"""A spread (std, variance) of one value per result: the unbiased estimate is 0 / 0.

PyTorch's `std` and `var` divide by n - 1 unless told `correction=0` (Bessel's
correction, the unbiased estimate of a population's spread from a sample). Over one
value that is 0 / 0: NaN in the forward pass. The usual way to get there is a spread
taken over the batch (a per-batch standardisation, `(x - x.mean(0)) / x.std(0)`) on a
batch of one example, which a data loader hands over last when the examples do not
divide into full batches. No weight decides how many values the op reduces, so the
learning rate and clipping cannot help; the size of the batches can.
"""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Fix, NotFix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import source_code, source_focus
from gradient_doctor.core.knowledge.source.calls import (
    find_call,
    find_method_call,
    is_namespace,
    parses,
    replace_span,
)
from gradient_doctor.core.knowledge.wording import at_step, nonfinite_counts, op_place

OPS = frozenset({"Std", "Var", "StdMean", "VarMean"})
# The small number added to a biased std that a division reads (a result of one value
# is then 0, not 0 / 0 again downstream): PyTorch's normalization layers' default eps.
_EPS = "1e-5"


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain a std or variance that wrote NaN from finite inputs, reducing one value per
    result; decline any other (a spread over several values is finite)."""
    origin = evidence.origin
    if origin is None or evidence.phase != "forward" or not origin.inputs or not origin.outputs:
        return None
    values, results = origin.inputs[0], origin.outputs[0]
    if not values.finite or results.nan == 0 or not values.size or not results.size:
        return None
    if values.size // results.size != 1:
        return None
    shape = "x".join(str(size) for size in values.shape)
    batch_of_one = evidence.weights_upstream is False and values.shape[:1] == (1,)
    explanation = (
        f"{op_place(origin)}{at_step(evidence.step)} wrote {nonfinite_counts(origin)}: it "
        f"took the spread of one value per result (its input is [{shape}]), and the unbiased "
        "estimate, PyTorch's default (correction=1), divides by n - 1 = 0: 0 / 0."
    )
    if batch_of_one:
        explanation += (
            " Its input is the step's batch, which held a single example: a data loader "
            "hands over a last, smaller batch when the examples do not divide into full "
            "batches (100 examples in batches of 33 leave 1)."
        )
    why = "no weight decides how many values the spread is taken over"
    return Diagnosis(
        category="forward_domain",
        explanation=explanation,
        # No `larger_batch` among them: the batch's size is the cause.
        not_fixes=(
            NotFix(
                "gradient_clipping",
                f"Clipping acts on gradients, after the forward pass that wrote it: {why}.",
                structural=True,
            ),
            NotFix(
                "lower_learning_rate",
                f"The learning rate cannot change it: {why}.",
                structural=True,
            ),
        ),
        fixes=(_biased(evidence), *((_drop_last(),) if batch_of_one else ())),
    )


def _drop_last() -> Fix:
    return Fix(
        "drop_last_batch",
        "Drop the last, smaller batch, so that every batch the step sees holds several examples",
        "loader = DataLoader(dataset, batch_size=64, shuffle=True, drop_last=True)",
    )


_BIASED_TITLE = (
    "Take the spread with correction=0 (divide by n, not n - 1){eps}: over one value it is "
    "0, and the result stays finite"
)


def _biased(evidence: Evidence) -> Fix:
    """The user's `std` or `var` call with `correction=0` (a std also plus a small eps, for
    a division that reads it): one value's spread is then 0, not 0 / 0. The code to write
    when the line's call cannot be read or already passes a correction."""
    rewritten = _biased_line(evidence)
    if rewritten is None:
        return Fix(
            "biased_spread",
            _BIASED_TITLE.format(eps=f" plus {_EPS} where a division reads it"),
            f"scale = x.std(dim=0, correction=0) + {_EPS}  # or x.var(dim=0, correction=0)",
        )
    eps = f" plus {_EPS}" if f"+ {_EPS})" in rewritten else ""
    return Fix("biased_spread", _BIASED_TITLE.format(eps=eps), rewritten, rewrite=(rewritten,))


def _biased_line(evidence: Evidence) -> str | None:
    """The user's line with its `std` or `var` call biased (`_biased`), or None."""
    code = source_code(evidence)
    if not code:
        return None
    names = ("std", "var")
    focus = source_focus(evidence)
    method = find_method_call(code, names, focus)
    call = find_call(code, names, focus) if method is None else None
    if method is not None:
        if any(keyword in ("correction", "unbiased") for keyword, _ in method.kwargs):
            return None
        biased = method.render(method.receiver, (*method.args, "correction=0"))
        name, start, end = method.name, method.start, method.end
    elif call is not None and is_namespace(call.prefix):
        if any(keyword in ("correction", "unbiased") for keyword, _ in call.kwargs):
            return None
        biased = call.render((*call.args, "correction=0"))
        name, start, end = call.name, call.start, call.end
    else:
        return None
    if name == "std":
        biased = f"({biased} + {_EPS})"
    rewritten = replace_span(code, start, end, biased)
    return rewritten if parses(rewritten) else None
