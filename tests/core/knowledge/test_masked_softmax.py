"""A softmax whose rows are masked with -inf everywhere: the mask's fill made finite."""

from dataclasses import replace

from gradient_doctor.core.evidence import OpCall
from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.knowledge import diagnose


def _softmax_evidence(make_evidence, make_stats, fill_line, **inputs):
    scores = make_stats(min=None, max=2.5, **{"inf": 12, "neg_inf": 12, **inputs})
    evidence = make_evidence(
        op="Softmax",
        code="weights = tf.nn.softmax(scores, axis=-1)",
        inputs=(scores,),
        outputs=(make_stats(min=0.0, max=1.0, nan=6),),
    )
    if fill_line is None:
        return evidence
    producer = OpCall("SelectV2", SourceLine("train.py", 41, fill_line), ())
    return replace(evidence, input_producers=(producer,))


def _stats_with(make_stats):
    def make(**kwargs):
        neg_inf = kwargs.pop("neg_inf", 0)
        pos_inf = kwargs.pop("pos_inf", 0)
        return replace(make_stats(**kwargs), neg_inf=neg_inf, pos_inf=pos_inf)

    return make


def test_the_where_that_wrote_the_minus_inf_gets_the_dtypes_lowest_value(make_evidence, make_stats):
    fill = 'scores = tf.where(keep, scores, float("-inf"))'
    evidence = _softmax_evidence(make_evidence, _stats_with(make_stats), fill)
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "forward_domain"
    assert "12 -inf values" in diagnosis.explanation
    assert "0 / 0" in diagnosis.explanation
    assert "train.py:41" in diagnosis.explanation
    (fix,) = diagnosis.fixes
    assert fix.family == "finite_mask"
    (edit,) = fix.edits
    assert edit.new_lines == ("scores = tf.where(keep, scores, scores.dtype.min)",)
    assert [item.remedy for item in diagnosis.not_fixes] == [
        "gradient_clipping",
        "lower_learning_rate",
    ]


def test_a_fill_it_cannot_rewrite_gets_the_generic_line(make_evidence, make_stats):
    fill = "scores = scores + mask_bias"  # an additive mask: no -inf spelled here
    evidence = _softmax_evidence(make_evidence, _stats_with(make_stats), fill)
    (fix,) = diagnose(evidence).fixes
    assert fix.edits == () and "scores.dtype.min" in fix.code


def test_a_softmax_handed_a_nan_or_an_inf_is_not_a_masked_row(make_evidence, make_stats):
    stats = _stats_with(make_stats)
    for bad in ({"nan": 3}, {"pos_inf": 2}):
        evidence = _softmax_evidence(make_evidence, stats, None, **bad)
        assert all(fix.family != "finite_mask" for fix in diagnose(evidence).fixes)


def test_scores_minus_their_log_sum_exp_over_a_row_masked_everywhere(make_evidence, make_stats):
    # torch.distributions.Categorical(logits=...) normalises the logits by their
    # log-sum-exp: -inf - -inf in a state whose every action is masked. The fill is a
    # method of an expression's value, so the lowest value is the dtype the replay saw.
    stats = _stats_with(make_stats)
    logits = stats(min=-1.0, max=0.6, inf=137, neg_inf=137)
    evidence = make_evidence(
        op="Sub",
        code="return Categorical(logits=logits, validate_args=False)",
        inputs=(logits, stats(min=-0.5, max=1.7, inf=1, neg_inf=1)),
        outputs=(stats(min=-2.3, max=0.0, nan=5, inf=132, neg_inf=132),),
    )
    fill = 'logits = self.pi(h).masked_fill(~mask, float("-inf"))'
    producer = OpCall("MaskedFill", SourceLine("policy.py", 29, fill, 9, 53), ())
    evidence = replace(
        evidence,
        input_producers=(producer, None),
        setup=replace(evidence.setup, framework="torch"),
    )
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "forward_domain"
    assert "-inf - -inf is NaN" in diagnosis.explanation
    assert "policy.py:29" in diagnosis.explanation
    (fix,) = diagnosis.fixes
    (edit,) = fix.edits
    assert edit.new_lines == (
        "logits = self.pi(h).masked_fill(~mask, torch.finfo(torch.float32).min)",
    )
