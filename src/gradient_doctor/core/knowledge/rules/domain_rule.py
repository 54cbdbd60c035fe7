"""The shared shape of forward-domain rules: an op fed a value where it is undefined."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gradient_doctor.core.evidence import Evidence, OpCall
from gradient_doctor.core.findings import Fix, Origin, SourceLine
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import (
    framework_of,
    input_at,
    largest_magnitude,
    source_code,
    source_focus,
)
from gradient_doctor.core.knowledge.remedies.not_fixes import forward_not_fixes
from gradient_doctor.core.knowledge.rewrites.activation import positive_output
from gradient_doctor.core.knowledge.rewrites.guards import already_guarded, guard_fix
from gradient_doctor.core.knowledge.rewrites.variance import two_pass_variance
from gradient_doctor.core.knowledge.source.twins import twin_calls
from gradient_doctor.core.knowledge.wording import (
    at_step,
    count,
    explain_input,
    format_number,
    from_data_note,
    rounding_note,
)

# A share of an op's values below its domain above which they look negative by design
# (the root of a signed difference), not by accident (a variance rounded below zero, a
# probability that underflowed): a clamp would then rewrite what the code computes.
BY_DESIGN_SHARE = 0.05
# A call of the origin's op whose input came this close to the domain's edge at the
# failing step is guarded with it: one step from failing the same way.
NEAR_EDGE = 1e-3
# The magnitude fix: the op applied to |x| (kept off 0, where a root's gradient is inf).
_MAGNITUDE = "{maximum}({abs}({arg}), 1e-12)"


@dataclass(frozen=True)
class Domain:
    """Where one op is defined, and how to keep its argument there.

    Attributes:
        rule: what the op does outside its domain, e.g. "log of 0 is -inf ...".
        family: the fix family of the guard, e.g. "safe_log".
        title: the guard fix's title.
        argument: which argument is out of range (0 for log, 1 for xlogy's y).
        extreme: "min" when the smallest value matters, "magnitude" for the largest |x|.
        boundary: the domain's edge, for noting overshoots that come from rounding.
        digits: significant digits to show the value with.
        signed: the op is often fed a signed value on purpose (a root of a difference):
            a large share of negatives then gets the root of the magnitude first.
    """

    rule: str
    family: str
    title: str
    argument: int = 0
    extreme: str = "min"
    boundary: float | None = None
    digits: int = 4
    signed: bool = False


@dataclass(frozen=True)
class Sibling:
    """Another call of the origin's op, guarded with it.

    Attributes:
        source: its line, with the call's span.
        reached: the lowest value its risky argument took at the failing step.
    """

    source: SourceLine
    reached: float


def risky_siblings(
    evidence: Evidence,
    domain: Domain,
    upper: float | None = None,
    near: float | None = NEAR_EDGE,
) -> tuple[Sibling, ...]:
    """The step's other calls of the origin's op whose argument stood where the origin's
    did: finite values within `near` of the domain's edge (or past it; None: at any
    distance above it, for a range the guard leaves alone away from its edge), none
    above `upper` when given (a log of a probability: a regression's output above 1 is
    not one), made by the user's own line and not already guarded as written.

    A call met several times in the step (a loop) counts once, and only when no run of
    it left the range. A call on a twin of the origin's line (`twin_calls`) is guarded
    however far from the edge it stood at this step: the next batch takes it there.
    """
    if domain.boundary is None or domain.extreme != "min" or evidence.origin is None:
        return ()
    # Lines written as the origin's is (`log(p_a)` beside `log(p_b)`): at any distance.
    twins = {
        (call.source.file, call.source.line)
        for call in twin_calls(evidence.origin.source, evidence.same_op_calls)
    }
    by_place: dict[tuple, list[OpCall]] = {}
    for call in evidence.same_op_calls:
        place = (call.source.file, call.source.line, call.source.span)
        by_place.setdefault(place, []).append(call)
    found = []
    for calls in by_place.values():
        lows = [_in_range(call, domain, upper) for call in calls]
        source = calls[0].source
        if any(low is None for low in lows) or source.span is None:
            continue
        twin = (source.file, source.line) in twins
        if near is not None and min(lows) - domain.boundary >= near and not twin:
            continue
        if already_guarded(source.code.strip(), calls[0].op, source.span):
            continue
        found.append(Sibling(source, min(lows)))
    return tuple(found)


def _in_range(call: OpCall, domain: Domain, upper: float | None) -> float | None:
    """The lowest finite value of `call`'s risky argument, or None when the call is not
    one to guard with the origin (a library's op, values not finite or above `upper`)."""
    if call.source_kind != "op" or domain.argument >= len(call.inputs):
        return None
    stats = call.inputs[domain.argument]
    if not stats.finite or stats.min is None:
        return None
    if upper is not None and (stats.max is None or stats.max > upper):
        return None
    return stats.min


def siblings_note(evidence: Evidence, siblings: Sequence[Sibling], digits: int = 4) -> str:
    """ " Also guarded: the log at line 51, whose input reached 0.0002 at this step." """
    if not siblings:
        return ""
    origin = evidence.origin.source if evidence.origin is not None else None
    name = evidence.origin.op.lower() if evidence.origin is not None else "call"
    parts = []
    for sibling in siblings:
        source = sibling.source
        where = f"line {source.line}"
        if origin is not None and source.file != origin.file:
            where += f" of {source.file}"
        other = (
            "other "
            if origin is not None
            and (source.file, source.line)
            == (
                origin.file,
                origin.line,
            )
            else ""
        )
        parts.append(
            f"the {other}{name} at {where}, whose input reached "
            f"{format_number(sibling.reached, digits)} at this step"
        )
    return " Also guarded: " + "; ".join(parts) + "."


def diagnose_domain(
    evidence: Evidence,
    domain: Domain,
    extra_fixes: Sequence[Fix] = (),
    siblings: Sequence[Sibling] = (),
) -> Diagnosis | None:
    """Explain a forward op that went non-finite outside its domain; decline in backward.

    Args:
        evidence: the failing step's `Evidence`.
        domain: the op's `Domain`.
        extra_fixes: fixes proposed after the guard.
        siblings: other calls of the op that the guard guards too (`risky_siblings`).

    Returns:
        A `forward_domain` diagnosis, or None for a backward origin.
    """
    origin = evidence.origin
    if origin is None or evidence.phase != "forward":
        return None
    stats = input_at(origin, domain.argument)
    if domain.extreme == "min":
        value = stats.min if stats else None
    else:
        value = largest_magnitude(stats)
    reached = format_number(value, domain.digits)
    if stats and stats.zeros and domain.boundary == 0:
        reached += f" ({count(stats.zeros, 'exact zero')})"
    if value is not None and domain.boundary is not None:
        reached += rounding_note(abs(value - domain.boundary))
    subject = "The input to" if domain.argument == 0 else "The second argument of"
    focus = source_focus(evidence)
    guard = guard_fix(
        domain.family,
        domain.title,
        source_code(evidence),
        origin.op,
        focus=focus,
        at=origin.source,
        also=[sibling.source for sibling in siblings],
        framework=framework_of(evidence),
    )
    explanation = explain_input(origin, evidence.step, subject, reached, domain.rule)
    if guard.rewrite:
        explanation += siblings_note(evidence, siblings, domain.digits)
    fixes: tuple[Fix, ...] = (guard, *extra_fixes)
    share = below_domain_share(origin, domain, value)
    # A share below the domain that a layer's raw output made (not a difference): a
    # positive quantity predicted with nothing to keep it positive, for a root as for a
    # log (a scale head's output into a distribution's log-density).
    positive = (
        positive_output(evidence, domain.argument, framework_of(evidence))
        if share is not None and share > BY_DESIGN_SHARE and domain.boundary == 0
        else None
    )
    negative = value is not None and value < 0 and not rounding_note(abs(value))
    trained = _trained_input(evidence, domain) if negative and domain.signed else None
    variance = evidence.one_pass_variance if negative else None
    if variance is not None:  # a variance whose one-pass formula cancelled below 0
        explanation += cancellation_note(*variance)
        clamp = replace(guard, clamped_share=share) if share is not None else guard
        fixes = (two_pass_variance(*variance, framework_of(evidence)), clamp, *extra_fixes)
    elif trained is not None:  # a trained variable itself went below the domain
        explanation += (
            f" Its input is the trained variable `{trained}` itself: the updates moved it "
            "below 0, and nothing in the model keeps it positive."
        )
        fixes = (_positive_variable(evidence, trained, focus), guard, *extra_fixes)
    elif positive is not None:
        explanation += unconstrained_note(origin, evidence.step, share, domain.signed)
        # The generic snippet of the same remedy gives way to the patch of the line.
        others = [f for f in extra_fixes if f.family != positive.family or f.edits]
        fixes = (positive, replace(guard, clamped_share=share), *others)
    elif share is not None and share > BY_DESIGN_SHARE and _of_a_prediction(evidence):
        explanation += prediction_note(origin, evidence.step, share)
        activations = [f for f in extra_fixes if f.family == "activation_change"]
        others = [f for f in extra_fixes if f.family != "activation_change"]
        fixes = (*activations, replace(guard, clamped_share=share), *others)
    elif share is not None and share > BY_DESIGN_SHARE:
        explanation += by_design_note(origin, evidence.step, share)
        fixes = (replace(guard, clamped_share=share), *extra_fixes)
        if domain.signed:
            magnitude = guard_fix(
                "magnitude",
                "Take the root of the magnitude, if a signed value is what it is meant for",
                source_code(evidence),
                origin.op,
                template=_MAGNITUDE,
                focus=focus,
                framework=framework_of(evidence),
            )
            fixes = (magnitude, *fixes)
    # A cancelled variance is the computation's, whatever the data: no note of its origin.
    made_by = "" if variance is not None else from_data_note(evidence.weights_upstream)
    return Diagnosis(
        category="forward_domain",
        explanation=explanation + made_by,
        not_fixes=forward_not_fixes(
            f"the invalid input to {origin.reported_op}", evidence.weights_upstream
        ),
        fixes=fixes,
    )


# The fewest values of which a share below 0 says anything of design: one scalar below
# 0 (a trained variance gone negative) is 100% of one value.
MIN_VALUES_FOR_SHARE = 8
_POSITIVE_TEMPLATE = "{softplus}({arg}) + 1e-6"


def _trained_input(evidence: Evidence, domain: Domain) -> str | None:
    """The trained variable that is itself the op's checked argument, or None."""
    read = evidence.read_variables
    return read[domain.argument] if domain.argument < len(read) else None


def _positive_variable(evidence: Evidence, variable: str, focus) -> Fix:
    """The variable trained through softplus on the op's line (`noise_var` into a root)."""
    return guard_fix(
        "activation_change",
        f"Keep `{variable}` positive by construction: train it through softplus (it then "
        "holds softplus's input, so read the value the op uses, not the variable, when you "
        "print it)",
        source_code(evidence),
        evidence.origin.op,
        template=_POSITIVE_TEMPLATE,
        focus=focus,
        framework=framework_of(evidence),
    )


def below_domain_share(origin: Origin, domain: Domain, value: float | None) -> float | None:
    """The share of the op's values that fell below a domain starting at 0, from the NaN
    its elementwise output holds there; None when unknown, when the lowest value is
    only a rounding past 0, or when the op had too few values for a share to tell
    (`MIN_VALUES_FOR_SHARE`)."""
    if domain.extreme != "min" or domain.boundary != 0 or not origin.outputs:
        return None
    if value is None or value >= 0 or rounding_note(abs(value)):
        return None
    return output_share(origin, "nan")


def output_share(origin: Origin, count: str) -> float | None:
    """The share of the op's first output that its `count` ("nan", "inf") holds; None
    with no output, or too few values for a share to tell (`MIN_VALUES_FOR_SHARE`)."""
    if not origin.outputs:
        return None
    output = origin.outputs[0]
    size = output.size or (
        math.prod(output.shape) if all(d is not None for d in output.shape) else 0
    )
    return getattr(output, count) / size if size >= MIN_VALUES_FOR_SHARE else None


def unconstrained_note(origin: Origin, step: int | None, share: float, signed: bool = True) -> str:
    """Say that so many values below the domain, made by a layer's raw output, are a
    positive quantity predicted with nothing to keep it positive (`signed`: the op is
    one a magnitude is also proposed for, a root)."""
    magnitude = (
        ", and the magnitude would reward negative outputs as much as positive ones"
        if signed
        else ""
    )
    return (
        f"{_below_zero(origin, step, share)}: the value is a layer's output, which nothing "
        "keeps positive; a clamp would set each of them to the edge of the domain, with "
        f"gradient 0 there, so those examples stop training the layer{magnitude}."
    )


# The layer Keras runs a compiled loss in: its ops read the model's predictions.
_COMPILED_LOSS = "compile_loss"
# Ops that make a signed difference (of the predictions and the targets).
_DIFFERENCES = frozenset({"Sub", "SquaredDifference", "Neg"})


def _of_a_prediction(evidence: Evidence) -> bool:
    """Whether the op ran inside a library loss on the model's predictions themselves
    (Keras's compiled loss: a Poisson loss's log of `y_pred`), not on a difference of
    them and the targets (a root of `y_true - y_pred`, signed by design)."""
    layer = evidence.origin.layer or ""
    differences = evidence.feeding_ops & _DIFFERENCES
    return layer.split("/")[0] == _COMPILED_LOSS and not differences


def prediction_note(origin: Origin, step: int | None, share: float) -> str:
    """Say that so many predictions below the domain of the loss's op are a positive
    quantity predicted by an output that nothing keeps positive."""
    return (
        f"{_below_zero(origin, step, share)}: the loss takes them from the model's "
        "predictions, which must be positive for it (a count's rate, a scale), and the "
        "output layer has nothing that keeps them so (a Dense layer with no activation); "
        "a clamp would set each of them to the edge of the domain, with gradient 0 there, "
        "so those examples stop training the model. Give the output layer a positive "
        'activation (activation="softplus", or "exponential" for a log-linear rate).'
    )


# The relative rounding error of one value (half a unit in the last place), by dtype.
_ROUNDING = {"float16": 4.9e-4, "bfloat16": 3.9e-3, "float32": 6.0e-8, "float64": 1.1e-16}


def cancellation_note(sub: OpCall, mean_of_squares: OpCall) -> str:
    """Say that the input is a variance computed in one pass, whose two terms cancel."""
    terms = max((largest_magnitude(stats) or 0.0 for stats in sub.inputs), default=0.0)
    dtype = sub.inputs[0].dtype if sub.inputs else "float32"
    error = terms * _ROUNDING.get(dtype, _ROUNDING["float32"])
    where = f"your line {sub.source.file}:{sub.source.line} `{sub.source.code.strip()}`"
    return (
        f" Its input is a variance computed in one pass, E[x^2] - E[x]^2 ({where}): both "
        f"terms reached {format_number(terms)}, and {dtype} rounds each to about "
        f"{format_number(error)}, so where the true variance is smaller than that their "
        "difference is rounding, and its sign is chance. A variance is never negative; "
        "computed from the deviations from the mean (two passes), it cannot cancel."
    )


def by_design_note(origin: Origin, step: int | None, share: float) -> str:
    """Say that so many values below the domain look meant, and what a clamp would do."""
    return (
        f"{_below_zero(origin, step, share)}: so many suggests a value negative by design (a "
        "signed difference, say), not by accident; a clamp would set each of them to the "
        "edge of the domain, with gradient 0 there, which rewrites what the code computes."
    )


def _below_zero(origin: Origin, step: int | None, share: float) -> str:
    """ " 22 of 64 values (34%) were below 0 at step 7"."""
    output = origin.outputs[0]
    size = output.size or math.prod(d or 1 for d in output.shape)
    return f" {output.nan} of {size} values ({share:.0%}) were below 0{at_step(step)}"
