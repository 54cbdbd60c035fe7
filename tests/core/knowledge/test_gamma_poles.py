"""lgamma and digamma at their pole: an argument at 0 (a count model's dispersion)."""

import dataclasses

from gradient_doctor.core.knowledge import diagnose


def test_lgamma_at_zero_is_a_pole_and_every_bare_call_is_guarded(
    make_evidence, make_stats, families
):
    evidence = make_evidence(
        op="Lgamma",
        code="ll = tf.math.lgamma(y + r) - tf.math.lgamma(r)",
        inputs=(make_stats(min=0.0, max=3.5, zeros=21, size=128),),
        outputs=(make_stats(min=-0.1, max=2.0, inf=21, size=128),),
    )
    diagnosis = diagnose(dataclasses.replace(evidence, weights_upstream=True))
    assert diagnosis.category == "forward_domain"
    assert "reached 0 (21 exact zeros)" in diagnosis.explanation
    assert "lgamma is infinite at 0 and at each negative integer" in diagnosis.explanation
    assert families(diagnosis) == ["clip_input_domain", "activation_change"]
    assert diagnosis.fixes[0].code.startswith("ll = tf.math.lgamma(tf.maximum(y + r, 1e-7))")
    assert "softplus" in diagnosis.fixes[1].code


def test_a_pole_the_data_reached_gets_no_softplus(make_evidence, make_stats, families):
    evidence = make_evidence(
        op="Digamma",
        code="g = torch.digamma(counts)",
        inputs=(make_stats(min=0.0, max=9.0, zeros=2),),
        outputs=(make_stats(inf=2),),
    )
    diagnosis = diagnose(dataclasses.replace(evidence, weights_upstream=False))
    assert "digamma is infinite at 0" in diagnosis.explanation
    assert families(diagnosis) == ["clip_input_domain"]


def test_a_log_of_the_datas_own_zero_gets_no_softplus(make_evidence, make_stats, families):
    evidence = make_evidence(
        op="Log",
        code="nll = -tf.math.log(1.0 - y_true)",
        inputs=(make_stats(min=0.0, max=0.9, zeros=3),),
        outputs=(make_stats(inf=3),),
    )
    diagnosis = diagnose(dataclasses.replace(evidence, weights_upstream=False))
    assert "activation_change" not in families(diagnosis)
