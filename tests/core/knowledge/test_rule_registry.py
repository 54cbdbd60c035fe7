"""The registry: op families, lookups and the order in which rules are asked."""

import pytest

from gradient_doctor.core.findings import CATEGORIES, FIX_FAMILIES
from gradient_doctor.core.knowledge import diagnose
from gradient_doctor.core.knowledge.registry import (
    FAMILIES,
    Family,
    family_for,
    index_families,
)


@pytest.mark.parametrize(
    ("op", "phase", "gradient_of", "family"),
    [
        ("Exp", "forward", None, "exp_overflow"),
        ("Log", "forward", None, "log_domain"),
        ("Sqrt", "forward", None, "sqrt_domain"),
        ("RealDiv", "forward", None, "division"),
        ("Acos", "forward", None, "inverse_trig"),
        ("MatMul", "forward", None, "overflow_generic"),
        ("SqrtGrad", "backward", "Sqrt", "backward_singularity"),
        ("RealDiv", "backward", "RealDiv", "backward_singularity"),
        ("MatMul", "backward", "MatMul", "overflow_generic"),
        ("Mul", "backward", "Exp", "overflow_generic"),
        ("Foo", "forward", None, None),
    ],
)
def test_family_lookup(make_evidence, op, phase, gradient_of, family):
    found = family_for(make_evidence(op=op, phase=phase, gradient_of=gradient_of))
    assert (found.name if found else None) == family


def test_an_op_claimed_twice_is_an_error():
    def rule(evidence):
        return None

    twice = (
        Family("a", rule, forward_ops=frozenset({"Exp"})),
        Family("b", rule, frozenset({"Exp"})),
    )
    with pytest.raises(ValueError, match="'Exp' is claimed by families 'a' and 'b'"):
        index_families(twice, backward=False)


def test_every_family_has_ops():
    for family in FAMILIES:
        assert family.forward_ops or family.gradient_of


def test_every_diagnosis_uses_known_ids(make_evidence, make_stats):
    for family in FAMILIES:
        for op in sorted(family.forward_ops)[:3]:
            diagnosis = diagnose(make_evidence(op=op, outputs=(make_stats(inf=1, nan=1),)))
            assert diagnosis.category in CATEGORIES
            assert all(fix.family in FIX_FAMILIES for fix in diagnosis.fixes)
            assert diagnosis.fixes, op
        for op in sorted(family.gradient_of)[:3]:
            evidence = make_evidence(op="Mul", phase="backward", gradient_of=op)
            assert diagnose(evidence).category in CATEGORIES


def test_every_forward_origin_rules_out_the_gradient_remedies(make_evidence, make_stats):
    for family in FAMILIES:
        for op in sorted(family.forward_ops):
            diagnosis = diagnose(make_evidence(op=op, outputs=(make_stats(inf=2, nan=1),)))
            remedies = [item.remedy for item in diagnosis.not_fixes]
            # A spread over one value per result: the batch's size is the cause.
            expected = ["gradient_clipping", "lower_learning_rate"]
            if family.name != "sample_spread":
                expected.append("larger_batch")
            assert remedies == expected, op
