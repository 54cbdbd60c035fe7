"""Logarithms (Log, Log1p, Xlogy, Xlog1py) fed a value outside their domain."""

from __future__ import annotations

import re
from dataclasses import replace

from gradient_doctor.core.evidence import Evidence, OpCall
from gradient_doctor.core.findings import Edit, Fix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import source_code, source_focus
from gradient_doctor.core.knowledge.rewrites.activation import positive_activation
from gradient_doctor.core.knowledge.rewrites.exp import logsumexp_over_lines, stable_logsumexp
from gradient_doctor.core.knowledge.rewrites.guards import guard_fix
from gradient_doctor.core.knowledge.rewrites.log_sigmoid import log_sigmoid
from gradient_doctor.core.knowledge.rewrites.log_softmax import (
    log_softmax,
    log_softmax_moved,
    logged_softmax_fix,
)
from gradient_doctor.core.knowledge.rules.domain_rule import (
    BY_DESIGN_SHARE,
    Domain,
    diagnose_domain,
    risky_siblings,
)
from gradient_doctor.core.knowledge.source.call_names import call_names
from gradient_doctor.core.knowledge.source.calls import find_call, replace_span
from gradient_doctor.core.knowledge.source.spelling import namespace

_TITLE = "Keep the logarithm's argument inside its domain"
_DOMAINS = {
    "Log": Domain("log of 0 is -inf and of a negative number NaN", "safe_log", _TITLE, boundary=0),
    "Log1p": Domain("log1p of -1 is -inf and below -1 NaN", "safe_log", _TITLE, boundary=-1),
    "Xlogy": Domain(
        "xlogy(x, y) is -inf at y = 0 and NaN for y < 0 (where x is not 0)",
        "safe_log",
        _TITLE,
        argument=1,
        boundary=0,
    ),
    "Xlog1py": Domain(
        "xlog1py(x, y) is -inf at y = -1 and NaN below (where x is not 0)",
        "safe_log",
        _TITLE,
        argument=1,
        boundary=-1,
    ),
}
OPS = frozenset(_DOMAINS)
# Words that mark the log's argument as a probability (a softmax or sigmoid output).
# Not "likelihood": a continuous model's (a mixture density network's sum of weighted
# Gaussian densities) is a density, which passes 1 as its variances shrink: a clip into
# [1e-7, 1] caps it there, and its loss then stops falling (0.400 where the log's
# guard alone trains to 0.199).
_PROBABILITY_WORDS = ("prob", "pred", "softmax", "sigmoid")
# Ops whose output is a probability, seen upstream of the log in the replay.
_PROBABILITY_OPS = frozenset({"Sigmoid", "Softmax"})
# Activations whose output is positive but unbounded (a rate, a variance), seen upstream.
_NOT_PROBABILITY_OPS = frozenset({"Relu", "Relu6", "Elu", "Selu", "Softplus", "Exp"})
# The logarithms whose argument can be a probability (log1p's domain edge is -1: clipping
# its argument into [1e-7, 1] would cap a regression's predictions at 1).
_OF_PROBABILITY = frozenset({"Log", "Xlogy"})


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain a logarithm that went -inf or NaN in the forward pass."""
    if evidence.origin is None:
        return None
    op = evidence.origin.op
    code = source_code(evidence)
    probability = evidence.feeding_ops & _PROBABILITY_OPS
    # A name says probability only where no op seen upstream says otherwise: Keras hands
    # every loss its model's output as `y_pred`, a Poisson rate from a relu head as well
    # (a clip into [1e-7, 1] capped 27% of such a head's rates, half its targets above 1).
    named = any(word in code.lower() for word in _PROBABILITY_WORDS) and not (
        evidence.feeding_ops & _NOT_PROBABILITY_OPS and not probability
    )
    activation = generic = None  # the rewrite of a relu that made the input, when one did
    domain = _DOMAINS[op]
    if (probability or named) and _may_be_probability(evidence):
        # Every other bare log of a probability in this step is guarded with it: the
        # origin showed this model's probabilities do reach 0, any of its saturating
        # outputs can, and the guard leaves every value above 1e-7 as it was.
        siblings = risky_siblings(evidence, domain, upper=1.0, near=None)
        clip = guard_fix(
            "clip_input_domain",
            "Clip the probability into [1e-7, 1]",
            code,
            op,
            template="{clip}({arg}, 1e-7, 1.0)",
            focus=source_focus(evidence),
            at=evidence.origin.source,
            also=[sibling.source for sibling in siblings],
            framework=evidence.setup.framework,
        )
        sigmoid = "Sigmoid" in probability or "sigmoid" in code.lower()
        call = find_call(code, call_names(op), source_focus(evidence))
        torch = namespace(call, evidence.setup.framework) == "torch"
        exact = log_sigmoid(evidence) if sigmoid else None
        extra = (clip, _from_logits(binary=sigmoid, torch=torch)) if exact is None else (clip,)
    else:
        exact = None
        siblings = risky_siblings(evidence, domain)
        # The data's own zero (no weight in between) is no model output to make positive.
        if evidence.weights_upstream is not False:
            generic = _positive_activation(evidence.setup.framework)
        activation = positive_activation(evidence, domain.argument, generic)
        extra = (activation,) if activation is not None else ()
    diagnosis = diagnose_domain(evidence, domain, extra, siblings)
    if activation is not None and activation is not generic and diagnosis is not None:
        diagnosis = _relu_made_most(diagnosis, evidence, domain, activation)
    if diagnosis is not None and op == "Log" and evidence.weights_upstream is False:
        diagnosis = _zeros_of_the_data(diagnosis, evidence, domain, code)
    if diagnosis is not None and evidence.zeros_began is not None:
        diagnosis = _underflowed(diagnosis, evidence.zeros_began, evidence.setup.framework)
        logsumexp = _logsumexp_of_underflow(evidence)
        if logsumexp is not None:  # the same value, finite: before every clamp
            diagnosis = replace(diagnosis, fixes=(logsumexp, *diagnosis.fixes))
    exact = exact or log_softmax(code, op, source_focus(evidence)) or _log_input(code)
    softmax = log_softmax_moved(evidence.picked_softmax, evidence.origin.source) or (
        logged_softmax_fix(evidence.logged_softmax, evidence.origin.source)
    )
    exact = exact or softmax
    if diagnosis is None or exact is None:
        return diagnosis
    fixes = diagnosis.fixes
    if exact is softmax:  # the log of that softmax rewritten: no loss to hand logits to
        fixes = tuple(
            fix for fix in fixes if fix.family != "from_logits" or fix.edits or fix.rewrite
        )
    # First: it computes the same value, finite everywhere; the guard changes it.
    return replace(diagnosis, fixes=(exact, *fixes))


# A library loss that takes the log of its input unless told its input is a log already
# (PyTorch's Poisson NLL: `log_input=False` reads a rate, which a linear output makes
# negative): the keyword set so, the model's output is the log of the rate, any real.
_LOG_INPUT_LOSSES = re.compile(r"\b(poisson_nll_loss|PoissonNLLLoss)\(")
_LOG_INPUT_OFF = re.compile(r"\blog_input\s*=\s*False\b")


def _log_input(code: str) -> Fix | None:
    """The loss on the line told its input is the log of the rate (`log_input=True`),
    for a Poisson loss handed a rate with `log_input=False`; else None."""
    if not _LOG_INPUT_LOSSES.search(code) or not _LOG_INPUT_OFF.search(code):
        return None
    line = _LOG_INPUT_OFF.sub("log_input=True", code.strip())
    return Fix(
        "from_logits",
        "Hand the loss the log of the rate (log_input=True): the model's output is then "
        "the log-rate, any real number, and the loss takes its exp itself",
        line,
        rewrite=(line,),
    )


# Why each op that underflows wrote its zeros, and what to compute instead.
_UNDERFLOWED = {
    "Prod": "a product of many factors below 1 falls below float32's smallest value "
    "(1e-45) and becomes 0; its log is the sum of the factors' logs, which stays finite",
    "Exp": "the exp of a value below -103 is 0 in float32; the log of an exp is its "
    "exponent, which stays finite",
    "Softmax": "a softmax's entries far below the largest underflow to 0; log_softmax "
    "gives their logs directly",
}


def _underflowed(diagnosis: Diagnosis, began, framework: str) -> Diagnosis:
    """The zeros the log read traced to the op that underflowed to them (`prod` of 300
    probabilities), said in the explanation; for a product, its log computed as the sum
    of the logs as the first fix (the code to write: what reads the product changes)."""
    why = _UNDERFLOWED.get(began.op, "its values fell below the dtype's smallest and became 0")
    where = f"{began.source.file}:{began.source.line}"
    explanation = (
        f"{diagnosis.explanation} Those zeros began at {began.op} ({where}), which wrote "
        f"exact zeros from inputs that held none: {why}."
    )
    if began.op != "Prod":
        return replace(diagnosis, explanation=explanation)
    if framework == "torch":
        code = (
            "log_prod = torch.log(x).sum(dim=d)  # in place of torch.prod(x, dim=d): its log\n"
            "# a sum of such products in log space: torch.logsumexp(log_prod + log_w, dim=1)"
        )
    else:
        code = (
            "log_prod = tf.reduce_sum(tf.math.log(x), axis=d)  # in place of reduce_prod: its "
            "log\n# a sum of such products in log space: tf.reduce_logsumexp(log_prod + log_w, "
            "axis=1)"
        )
    log_space = Fix(
        "log_space",
        f"Compute the product's log as the sum of its factors' logs ({where}), and combine "
        "such logs with logsumexp: nothing underflows",
        code,
    )
    return replace(diagnosis, explanation=explanation, fixes=(log_space, *diagnosis.fixes))


def _logsumexp_of_underflow(evidence: Evidence) -> Fix | None:
    """For a log whose zeros an exp underflowed to, through a sum (a mixture's
    likelihood, `log(sum(exp(a)))`): the log of the sum computed as logsumexp(a), on one
    line or over the two (the sum's line, the log's); None for another shape."""
    began, origin = evidence.zeros_began, evidence.origin
    if began.op != "Exp" or origin.source is None:
        return None
    same_line = stable_logsumexp(origin.source.code.strip(), source_focus(evidence))
    if same_line is not None:
        return same_line
    log = OpCall(origin.op, origin.source, origin.inputs)
    over_lines = logsumexp_over_lines(began.source.code.strip(), log)
    if over_lines is None:
        return None
    # Written for the exp's line as the origin's: here the log is, so the roles swap.
    (log_line,) = over_lines.edits
    exp = began.source
    sum_line = Edit(exp.file, exp.line, exp.line, over_lines.rewrite, (exp.code.strip(),))
    return replace(over_lines, rewrite=log_line.new_lines, edits=(sum_line,))


def _relu_made_most(
    diagnosis: Diagnosis, evidence: Evidence, domain: Domain, activation: Fix
) -> Diagnosis:
    """With more than `BY_DESIGN_SHARE` of the log's input exact zeros a relu made, the
    relu's line rewritten comes first: the value is meant to be positive, and a clamp
    at the log would set most of it to the same constant (the guard is kept, with the
    share it clamps)."""
    zeros = _zeros_by_design(evidence, domain)
    if zeros is None:
        return diagnosis
    share = zeros[0] / zeros[1]
    guards = [f for f in diagnosis.fixes if f.family == domain.family]
    others = [f for f in diagnosis.fixes if f is not activation and f.family != domain.family]
    explanation = (
        f"{diagnosis.explanation} {zeros[0]} of its {zeros[1]} values are exact zeros a "
        "relu made: the value is meant to be positive, and the relu is what lets it be 0."
    )
    return replace(
        diagnosis,
        explanation=explanation,
        fixes=(activation, *(replace(g, clamped_share=share) for g in guards), *others),
    )


def _zeros_by_design(evidence: Evidence, domain: Domain, least: int = 1) -> tuple[int, int] | None:
    """(exact zeros, values) of the log's input when more than `BY_DESIGN_SHARE` of its
    `least` or more values are exact zeros; else None."""
    inputs = evidence.origin.inputs
    stats = inputs[domain.argument] if domain.argument < len(inputs) else None
    size = stats.size if stats is not None else None
    if not size or size < least or not stats.zeros or stats.zeros / size <= BY_DESIGN_SHARE:
        return None
    return stats.zeros, size


# The fewest values of the data whose share of zeros says they are zero by nature (a
# batch of targets, 82 zeros of 1024), not one element's few (1 zero of 8 counts).
_DATA_SHARE_VALUES = 64


def _zeros_of_the_data(
    diagnosis: Diagnosis, evidence: Evidence, domain: Domain, code: str
) -> Diagnosis:
    """A log of the data itself (no weight in between: targets or features taken to the
    log scale) with more than `BY_DESIGN_SHARE` of its values exact zeros: a count or an
    amount that is 0 by nature. A clamp would set each to log(1e-7), -16.1, far below
    the rest (the guard is kept, with the share it clamps); `log1p`, the log of one
    plus the value, is the usual transform of such data, 0 at 0, and comes first."""
    # One element of a pipeline (1 zero of 8 counts) tells no share.
    zeros = _zeros_by_design(evidence, domain, least=_DATA_SHARE_VALUES)
    if zeros is None:
        return diagnosis
    share = zeros[0] / zeros[1]
    fixes = tuple(
        replace(f, clamped_share=share) if f.family == domain.family else f for f in diagnosis.fixes
    )
    explanation = (
        f"{diagnosis.explanation} {zeros[0]} of its {zeros[1]} values are exact zeros of "
        "your data: a clamp would set each to log(1e-7) = -16.1, far below the rest."
    )
    call = find_call(code, ("log",), source_focus(evidence))
    if call is None:
        return replace(diagnosis, explanation=explanation, fixes=fixes)
    renamed = f"{call.prefix}log1p{call.text[len(call.prefix) + len(call.name) :]}"
    line = replace_span(code, call.start, call.end, renamed)
    log1p = Fix(
        "log1p",
        "Take log1p of the data (the log of one plus it, 0 at 0): the usual log scale of "
        "counts and amounts that can be 0",
        line,
        rewrite=(line,),
    )
    return replace(diagnosis, explanation=explanation, fixes=(log1p, *fixes))


def _may_be_probability(evidence: Evidence) -> bool:
    """Whether the log's argument can be a probability: a log of one, whose finite
    values the replay saw (when it did) inside [0, 1]. A `y_pred` above 1 is a
    regression's prediction, which a clip into [1e-7, 1] would cap."""
    op = evidence.origin.op
    if op not in _OF_PROBABILITY:
        return False
    index = _DOMAINS[op].argument
    inputs = evidence.origin.inputs
    if index >= len(inputs):
        return True
    low, high = inputs[index].min, inputs[index].max
    return (low is None or low >= 0.0) and (high is None or high <= 1.0)


def _from_logits(binary: bool, torch: bool = False) -> Fix:
    """Let the loss take the log of the logits itself, which is stable.

    Args:
        binary: bool, the probability is a sigmoid's (else a softmax's).
        torch: bool, the user's code is PyTorch's (the fix is spelled in it).
    """
    if binary:
        return Fix(
            "from_logits",
            "Drop the final sigmoid and compute the loss from the logits",
            (
                "logits = model(x)  # no torch.sigmoid at the end\n"
                "loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y)"
            )
            if torch
            else (
                "outputs = keras.layers.Dense(1)(x)  # no sigmoid\n"
                "loss = keras.losses.BinaryCrossentropy(from_logits=True)\n"
                "# by hand: tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits)"
            ),
        )
    return Fix(
        "from_logits",
        "Drop the final softmax and let the loss work on logits",
        (
            "logits = model(x)  # no softmax at the end\n"
            "loss = torch.nn.functional.cross_entropy(logits, target)"
        )
        if torch
        else (
            "outputs = keras.layers.Dense(num_classes)(x)  # no activation\n"
            "loss = keras.losses.CategoricalCrossentropy(from_logits=True)"
        ),
    )


def _positive_activation(framework: str = "tf") -> Fix:
    """Produce a value that must be positive with an activation that guarantees it."""
    softplus = "torch.nn.functional.softplus" if framework == "torch" else "tf.nn.softplus"
    return Fix(
        "activation_change",
        "Produce the logarithm's argument with softplus, which is always positive",
        f"x = {softplus}(pre_activation) + 1e-7  # instead of relu or a linear output",
    )
