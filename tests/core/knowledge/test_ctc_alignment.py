"""A CTC loss whose target no alignment to its input can spell."""

from gradient_doctor.core.findings import TensorStats
from gradient_doctor.core.knowledge import diagnose


def _lengths(low, high):
    return TensorStats("int64", (8,), low, high, 0, 0, 0, size=8)


def _ctc(make_evidence, make_stats, code, frames, labels):
    evidence = make_evidence(
        op="CtcLoss",
        code=code,
        inputs=(make_stats(min=-7.9, max=-0.01), make_stats(min=1, max=9), frames, labels),
        outputs=(TensorStats("float32", (8,), 15.5, 23.6, 0, 1, 0, size=8, pos_inf=1),),
        framework="torch",
    )
    return diagnose(evidence)


def test_an_input_shorter_than_every_target_is_said_and_zero_infinity_proposed(
    make_evidence, make_stats
):
    code = "loss = F.ctc_loss(logp, y, lengths, label_lengths)"
    diagnosis = _ctc(make_evidence, make_stats, code, _lengths(3, 20), _lengths(5, 7))
    assert diagnosis.category == "forward_domain"
    assert "gave 1 example of the batch's 8 an infinite loss" in diagnosis.explanation
    assert "an input of 3 frames holds no target" in diagnosis.explanation
    assert diagnosis.fixes[0].code == (
        "loss = F.ctc_loss(logp, y, lengths, label_lengths, zero_infinity=True)"
    )
    assert [n.remedy for n in diagnosis.not_fixes if n.structural] == [
        "gradient_clipping",
        "lower_learning_rate",
        "larger_batch",
    ]


def test_lengths_that_fit_leave_the_repeats_to_blame(make_evidence, make_stats):
    code = "loss = ctc(logp, y, lengths, label_lengths)"
    diagnosis = _ctc(make_evidence, make_stats, code, _lengths(9, 12), _lengths(5, 7))
    assert "(so repeated labels made a target too long)" in diagnosis.explanation
    # The module was built on no line the rule can read: only the filter is proposed.
    assert [fix.family for fix in diagnosis.fixes] == ["clean_input"]
