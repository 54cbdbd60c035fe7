"""The log-gamma and digamma functions (Lgamma, Digamma) at a pole: their argument at 0.

lgamma(x) = log|Gamma(x)| is infinite at 0 and at each negative integer, the poles of
the gamma function, and so is its derivative, digamma. A count model's likelihood
(negative binomial, Dirichlet-multinomial, beta-binomial) takes the lgamma of a
dispersion or concentration that must stay positive: a relu's zero, or an output with
nothing to keep it above 0, lands on the pole.
"""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.facts import framework_of
from gradient_doctor.core.knowledge.rewrites.activation import positive_activation
from gradient_doctor.core.knowledge.rules.domain_rule import (
    Domain,
    diagnose_domain,
    risky_siblings,
)
from gradient_doctor.core.knowledge.source.spelling import spell

_TITLE = "Keep the argument above 0, off the gamma function's poles"
_DOMAINS = {
    "Lgamma": Domain(
        "lgamma is infinite at 0 and at each negative integer (the gamma function's poles)",
        "clip_input_domain",
        _TITLE,
        boundary=0,
    ),
    "Digamma": Domain(
        "digamma is infinite at 0 and at each negative integer (the gamma function's poles)",
        "clip_input_domain",
        _TITLE,
        boundary=0,
    ),
}
OPS = frozenset(_DOMAINS)


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Explain an lgamma or digamma that went non-finite in the forward pass."""
    if evidence.origin is None:
        return None
    domain = _DOMAINS[evidence.origin.op]
    generic = None
    if evidence.weights_upstream is not False:  # a model's output, not the data's value
        generic = Fix(
            "activation_change",
            "Produce the argument with softplus, which is always positive (a dispersion, "
            "a concentration)",
            f"r = {spell(None, 'softplus', framework_of(evidence))}(pre_activation) + 1e-6"
            "  # not relu",
        )
    activation = positive_activation(evidence, domain.argument, generic)
    extra = (activation,) if activation is not None else ()
    return diagnose_domain(evidence, domain, extra, risky_siblings(evidence, domain))
