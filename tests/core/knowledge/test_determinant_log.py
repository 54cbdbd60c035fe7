"""The log of a determinant that came out negative (NaN) or zero (-inf)."""

import pytest

from gradient_doctor.core.knowledge import diagnose
from gradient_doctor.core.knowledge.rules.determinant_log import log_abs_determinant


def test_a_negative_determinant_gets_log_abs_det_on_the_users_line(
    make_evidence, make_stats, families
):
    evidence = make_evidence(
        op="Logdet",
        code="return y, h * w * torch.logdet(self.weight)",
        inputs=(make_stats(min=-0.79, max=0.77),),
        outputs=(make_stats(min=None, max=None, nan=1, size=1),),
        framework="torch",
    )
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "forward_domain"
    assert "the determinant here was negative" in diagnosis.explanation
    assert "log|det|" in diagnosis.explanation
    assert families(diagnosis) == ["log_abs_determinant"]
    assert diagnosis.fixes[0].code == (
        "return y, h * w * torch.linalg.slogdet(self.weight).logabsdet"
    )


def test_a_singular_matrix_is_told_so_and_gets_an_invertible_parameterisation(
    make_evidence, make_stats
):
    evidence = make_evidence(
        op="Logdet",
        code="ld = torch.logdet(w)",
        inputs=(make_stats(min=0.0, max=1.0),),
        outputs=(make_stats(min=None, max=None, inf=1, size=1),),
        framework="torch",
    )
    diagnosis = diagnose(evidence)
    assert "the determinant here was zero" in diagnosis.explanation
    assert "singular" in diagnosis.explanation
    assert [fix.family for fix in diagnosis.fixes] == ["constrain_weights"]
    assert "log|det W| = log_s.sum()" in diagnosis.fixes[0].code


@pytest.mark.parametrize(
    ("code", "framework", "rewritten"),
    [
        ("ld = w.logdet()", "torch", "ld = torch.linalg.slogdet(w).logabsdet"),
        (
            "nll = -(z.sum() + torch.logdet(m.weight))",
            "torch",
            "nll = -(z.sum() + torch.linalg.slogdet(m.weight).logabsdet)",
        ),
        ("ld = tf.linalg.logdet(cov)", "tf", "ld = tf.linalg.slogdet(cov)[1]"),
        ("ld = torch.logdet(w, extra)", "torch", None),
        ("ld = torch.det(w).log()", "torch", None),
    ],
)
def test_the_rewrite_takes_the_function_or_the_method(code, framework, rewritten):
    fix = log_abs_determinant(code, None, framework)
    assert (fix.code if fix else None) == rewritten
