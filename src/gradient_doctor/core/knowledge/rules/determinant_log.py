"""The log of a determinant (`torch.logdet`) of a matrix whose determinant is not positive.

`logdet(W)` is log(det W): NaN where det W < 0, -inf where it is 0. A finite matrix's
logdet is NaN for no other reason, so a NaN from finite input says the determinant was
negative. Where the term is a change of variables (an invertible layer of a normalizing
flow: a 1x1 convolution, a linear mixing), the density needs log|det W|, and a matrix
with a negative determinant is as invertible as one with a positive one: a random
rotation is a reflection half the time. `slogdet` computes log|det W| exactly, and its
gradient (W^-T) is the same as logdet's wherever both are defined.
"""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import framework_of, source_code, source_focus
from gradient_doctor.core.knowledge.remedies.not_fixes import forward_not_fixes
from gradient_doctor.core.knowledge.source.calls import (
    find_call,
    find_method_call,
    parses,
    replace_span,
)
from gradient_doctor.core.knowledge.wording import at_step, nonfinite_counts, op_place

OPS = frozenset({"Logdet"})
TITLE = "Take the log of the determinant's magnitude, log|det|, with slogdet"
# How each framework spells log|det X| ("{x}": the matrix as the user wrote it).
_LOG_ABS_DET = {
    "torch": "torch.linalg.slogdet({x}).logabsdet",
    "tf": "tf.linalg.slogdet({x})[1]",
}
# Glow's parameterisation of an invertible matrix, as code to read (no patch).
_LU = (
    "# W = P @ L @ (U + diag(exp(log_s))): P a fixed permutation, L unit lower-triangular,\n"
    "# U strictly upper-triangular, all trained but P; W is invertible for any values,\n"
    "# and log|det W| = log_s.sum()"
)


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain a logdet that went NaN (negative determinant) or -inf (singular)."""
    origin = evidence.origin
    if origin is None or evidence.phase != "forward" or not origin.outputs:
        return None
    if not all(stats.finite for stats in origin.inputs):
        return None
    output = origin.outputs[0]
    negative = output.nan > 0
    sign = "negative" if negative else "zero"
    explanation = (
        f"{op_place(origin)}{at_step(evidence.step)} wrote {nonfinite_counts(origin)} "
        f"from a finite matrix: the log of a determinant is NaN where the determinant is "
        f"negative and -inf where it is 0, so the determinant here was {sign}. "
    )
    if negative:
        explanation += (
            "A matrix with a negative determinant is as invertible as one with a positive "
            "one (a random rotation is a reflection half the time): where the term is a "
            "change of variables (an invertible layer of a flow), the density needs "
            "log|det|, which slogdet computes for either sign, with the same gradient. "
            "Where the matrix must be positive definite (a covariance), keep it so by "
            "construction instead (L L^T plus a small multiple of the identity)."
        )
    else:
        explanation += (
            "The matrix was singular, which an invertible layer must never be: keep it "
            "invertible by construction (an LU parameterisation with an exp'd diagonal)."
        )
    framework = framework_of(evidence)
    if negative:
        fix = log_abs_determinant(source_code(evidence), source_focus(evidence), framework)
        fix = fix or Fix("log_abs_determinant", TITLE, _LOG_ABS_DET[framework].format(x="W"))
    else:
        fix = Fix("constrain_weights", "Keep the matrix invertible by construction", _LU)
    return Diagnosis(
        category="forward_domain",
        explanation=explanation,
        not_fixes=forward_not_fixes(f"the {sign} determinant", evidence.weights_upstream),
        fixes=(fix,),
    )


def log_abs_determinant(code: str, focus: tuple[int, int] | None, framework: str) -> Fix | None:
    """The user's `logdet(x)` (a function or a tensor's method) rewritten as the
    framework's log|det x| ("torch" or "tf"), or None when the line has no such call."""
    code = code.strip()
    template = _LOG_ABS_DET.get(framework)
    if not code or template is None:
        return None
    call = find_call(code, ("logdet",), focus)
    if call is not None and len(call.args) == 1 and not call.kwargs:
        start, end, matrix = call.start, call.end, call.args[0].strip()
    else:
        method = find_method_call(code, ("logdet",), focus)
        if method is None or method.args or method.kwargs:
            return None
        start, end, matrix = method.start, method.end, method.receiver.strip()
    rewritten = replace_span(code, start, end, template.format(x=matrix))
    if parses(code) and not parses(rewritten):
        return None
    return Fix("log_abs_determinant", TITLE, rewritten, rewrite=(rewritten,))
