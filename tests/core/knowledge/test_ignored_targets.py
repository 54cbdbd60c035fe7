"""A negative log-likelihood averaged over a batch in which every target is ignored: 0/0."""

from gradient_doctor.core.findings import TensorStats
from gradient_doctor.core.knowledge import diagnose


def _nll(make_evidence, make_stats, code, low, high, op="NllLoss"):
    evidence = make_evidence(
        op=op,
        code=code,
        inputs=(
            make_stats(min=-4.3, max=-3.1),
            TensorStats("int64", (192,), low, high, 0, 0, 0, size=192),
        ),
        outputs=(TensorStats("float32", (), None, None, 1, 0, 0, size=1),),
        framework="torch",
    )
    return diagnose(evidence)


def test_a_batch_whose_every_target_is_ignored_is_said_and_its_mean_counted(
    make_evidence, make_stats
):
    code = "loss = F.cross_entropy(logits, labels.view(-1), ignore_index=-100)"
    diagnosis = _nll(make_evidence, make_stats, code, -100, -100)
    assert diagnosis.category == "forward_domain"
    assert "every one of this batch's 192 targets was -100 (the default ignore_index)" in (
        diagnosis.explanation
    )
    assert "0 / 0 is NaN" in diagnosis.explanation
    assert diagnosis.fixes[0].family == "safe_div"
    assert diagnosis.fixes[0].code == (
        'loss = (F.cross_entropy(logits, labels.view(-1), ignore_index=-100, reduction="sum")'
        " / (labels.view(-1) != -100).sum().clamp(min=1))"
    )
    assert "if (labels != -100).any():" in diagnosis.fixes[1].code
    assert {n.remedy for n in diagnosis.not_fixes if n.structural} == {
        "gradient_clipping",
        "lower_learning_rate",
    }


def test_class_weights_or_targets_that_differ_are_left_to_other_rules(make_evidence, make_stats):
    weighted = "loss = F.cross_entropy(logits, labels, weight=class_weights)"
    diagnosis = _nll(make_evidence, make_stats, weighted, -100, -100)
    assert [fix.family for fix in diagnosis.fixes] == ["skip_nonfinite_batch"]  # no rewrite
    mixed = _nll(make_evidence, make_stats, "loss = F.nll_loss(logp, y)", -100, 7)
    assert "targets was" not in mixed.explanation
