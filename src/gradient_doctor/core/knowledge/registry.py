"""The rule registry: which rule explains which op family, and in which order rules are asked."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import source_code
from gradient_doctor.core.knowledge.remedies.data import fit_to_batch_statistics, fit_to_data
from gradient_doctor.core.knowledge.remedies.history import fit_to_first_step, fit_to_history
from gradient_doctor.core.knowledge.remedies.initial_value import fit_to_initial_value
from gradient_doctor.core.knowledge.remedies.setup import fit_to_setup
from gradient_doctor.core.knowledge.rewrites.norm import mentions_norm
from gradient_doctor.core.knowledge.rules import (
    backward_singularity,
    bad_input,
    ctc_alignment,
    default,
    determinant_log,
    disconnected,
    division,
    exp_overflow,
    exploding_gradients,
    float16_range,
    gamma_poles,
    ignored_targets,
    inverse_trig,
    log_domain,
    loss_divergence,
    loss_input,
    loss_scale_collapse,
    masked_softmax,
    nonfinite_constant,
    norm_overflow,
    normalization,
    optimizer_overflow,
    overflow_generic,
    sample_spread,
    sqrt_domain,
    stale_gradients,
    stuck_units,
    weight_norm,
    where_trap,
    xla_only,
)

Rule = Callable[[Evidence], Diagnosis | None]


@dataclass(frozen=True)
class Family:
    """A family of ops that one rule explains.

    Attributes:
        name: the family's name, e.g. "exp_overflow".
        rule: turns an `Evidence` whose origin is in the family into a `Diagnosis`,
            or declines with None.
        forward_ops: the op types it explains in the forward pass.
        gradient_of: the forward op types whose gradients it explains.
        singular: the ops have their own limit, domain or singular point, so a
            growing gradient norm or a half-precision dtype does not explain them.
    """

    name: str
    rule: Rule
    forward_ops: frozenset[str] = frozenset()
    gradient_of: frozenset[str] = frozenset()
    singular: bool = True


FAMILIES: tuple[Family, ...] = (
    Family("exp_overflow", exp_overflow.diagnose, forward_ops=exp_overflow.OPS),
    Family("log_domain", log_domain.diagnose, forward_ops=log_domain.OPS),
    Family("sqrt_domain", sqrt_domain.diagnose, forward_ops=sqrt_domain.OPS),
    Family("division", division.diagnose, forward_ops=division.OPS),
    Family("inverse_trig", inverse_trig.diagnose, forward_ops=inverse_trig.OPS),
    Family("determinant_log", determinant_log.diagnose, forward_ops=determinant_log.OPS),
    Family("ctc_alignment", ctc_alignment.diagnose, forward_ops=ctc_alignment.OPS),
    Family("ignored_targets", ignored_targets.diagnose, forward_ops=ignored_targets.OPS),
    Family("gamma_poles", gamma_poles.diagnose, forward_ops=gamma_poles.OPS),
    Family("masked_softmax", masked_softmax.diagnose, forward_ops=masked_softmax.OPS),
    Family("normalization", normalization.diagnose, forward_ops=normalization.OPS),
    Family("weight_norm", weight_norm.diagnose, forward_ops=weight_norm.OPS),
    Family("sample_spread", sample_spread.diagnose, forward_ops=sample_spread.OPS),
    Family(
        "backward_singularity",
        backward_singularity.diagnose,
        gradient_of=backward_singularity.GRADIENT_OF,
    ),
    Family(
        "overflow_generic",
        overflow_generic.diagnose,
        forward_ops=overflow_generic.OPS,
        gradient_of=overflow_generic.OPS,
        singular=False,
    ),
)


def index_families(families: Iterable[Family], backward: bool) -> dict[str, Family]:
    """Map each op type to its family, for the forward or the backward pass.

    Raises:
        ValueError: when two families claim the same op type.
    """
    index: dict[str, Family] = {}
    for family in families:
        for op in family.gradient_of if backward else family.forward_ops:
            if op in index:
                raise ValueError(
                    f"Op type {op!r} is claimed by families {index[op].name!r} and "
                    f"{family.name!r}. Remove it from one of them."
                )
            index[op] = family
    return index


_FORWARD = index_families(FAMILIES, backward=False)
_BACKWARD = index_families(FAMILIES, backward=True)


def family_for(evidence: Evidence) -> Family | None:
    """The family of the evidence's origin op, or None when no family claims it."""
    origin = evidence.origin
    if origin is None:
        return None
    if evidence.phase == "backward":
        return _BACKWARD.get(origin.gradient_of or origin.op) or _BACKWARD.get(origin.op)
    return _FORWARD.get(origin.op)


def diagnose(evidence: Evidence) -> Diagnosis:
    """Turn the evidence of a failing step into a diagnosis.

    Rules are asked in order of precedence: a probability loss fed raw outputs, zero
    gradients behind stuck units (a layer's ReLUs all dead), a broken gradient path
    (variables with no gradient),
    weights the optimizer's own update wrote non-finite, bad input, a non-finite
    constant, a value only XLA made non-finite, finite gradients whose norm overflows,
    the tf.where trap, a collapsed loss scale, exploding gradients
    and half-precision range (unless the origin op has its own singular point), then the
    origin's op family, then the default rule. The remedies are then fitted to the
    user's setup (clipping or loss scaling already on), to the steps before (a forward
    failure thrown by one huge update) and to the data (unscaled input features).

    Args:
        evidence: everything known about the failing step.

    Returns:
        The first diagnosis a rule gives.
    """
    if evidence.pipeline is not None and evidence.bad_inputs and evidence.broken_state is None:
        # The batch's NaN was made by the user's own pipeline function: its op is
        # diagnosed as a step's would be (with the run's setup, so that its fixes are
        # spelled in the user's framework), and told as the origin of the bad input.
        written = replace(evidence.pipeline.evidence, setup=evidence.setup)
        return bad_input.written_by_pipeline(evidence, diagnose(written))
    family = family_for(evidence)
    singular = (family is not None and family.singular) or mentions_norm(source_code(evidence))
    rules: list[Rule] = [
        loss_input.diagnose,
        stuck_units.diagnose,
        loss_divergence.diagnose,
        stale_gradients.diagnose,
        disconnected.diagnose,
        optimizer_overflow.diagnose,
        bad_input.diagnose,
        nonfinite_constant.diagnose,
        xla_only.diagnose,
        norm_overflow.diagnose,
        where_trap.diagnose,
        normalization.diagnose_layer,
    ]
    if not singular:
        rules += [
            loss_scale_collapse.diagnose,
            exploding_gradients.diagnose,
            float16_range.diagnose,
        ]
    if family is not None:
        rules.append(family.rule)
    diagnosis = next(filter(None, (rule(evidence) for rule in rules)), None)
    diagnosis = diagnosis or default.diagnose(evidence)
    fitted = fit_to_history(fit_to_setup(diagnosis, evidence), evidence)
    fitted = fit_to_batch_statistics(fit_to_data(fitted, evidence), evidence)
    return fit_to_initial_value(fit_to_first_step(fitted, evidence), evidence)
