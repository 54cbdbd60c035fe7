"""The max-shift written for the groups a hand-written softmax sums over: an axis, segments
(a GNN's edge attention), a scatter-add, a mask, or -inf written before exp."""

import dataclasses

from gradient_doctor.core.dtype_limits import dtype_limits
from gradient_doctor.core.evidence import Reduction
from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.knowledge import diagnose
from gradient_doctor.core.knowledge.rewrites.exp import stable_softmax

SEGMENTS = Reduction(
    "segment",
    "UnsortedSegmentSum",
    function="tf.math.unsorted_segment_sum",
    segment_ids="receivers",
    num_segments="num_nodes",
)


def _fixes(evidence):
    return {fix.family: fix for fix in diagnose(evidence).fixes}


def _with(evidence, **changes):
    return dataclasses.replace(evidence, **changes)


def test_a_segment_softmax_shifts_by_each_segments_max_gathered_back(make_evidence, families):
    evidence = _with(make_evidence(code="e = tf.exp(scores)"), reduction_axis=None)
    assert "stable_softmax" not in families(diagnose(evidence))  # nothing says it is summed
    stable = _fixes(_with(evidence, reduction=SEGMENTS))["stable_softmax"]
    shifted = (
        "e = tf.exp(scores - tf.gather("
        "tf.math.unsorted_segment_max(scores, receivers, num_nodes), receivers))"
    )
    assert stable.rewrite == (shifted,)
    assert stable.code.splitlines()[0] == shifted
    assert "stable_segment_softmax(scores, receivers, num_nodes)" in stable.code
    assert "each segment's own maximum" in stable.title
    assert diagnose(_with(evidence, reduction=SEGMENTS)).fixes[0].family == "stable_softmax"


def test_sorted_segments_use_segment_max_and_keep_a_segment_of_minus_inf_finite(
    make_evidence, make_stats
):
    sorted_ids = Reduction("sorted_segment", "SegmentSum", segment_ids="ids")
    evidence = _with(make_evidence(code="w = tf.math.exp(logits)"), reduction=sorted_ids)
    assert _fixes(evidence)["stable_softmax"].rewrite == (
        "w = tf.math.exp(logits - tf.gather(tf.math.segment_max(logits, ids), ids))",
    )
    # segment_max of only -inf is -inf, and -inf - -inf is NaN: kept above the lowest value.
    masked_input = make_stats(min=-3.0, max=120.0, inf=2)
    masked_input = dataclasses.replace(masked_input, neg_inf=2)
    origin = dataclasses.replace(evidence.origin, inputs=(masked_input,))
    stable = _fixes(_with(evidence, origin=origin))["stable_softmax"]
    assert (
        "tf.gather(tf.maximum(tf.math.segment_max(logits, ids), tf.float32.min), ids)"
        in (stable.rewrite[0])
    )


def test_keras_segments_are_spelled_with_keras_ops(make_evidence):
    reduction = dataclasses.replace(SEGMENTS, function="keras.ops.segment_sum")
    evidence = _with(make_evidence(code="e = keras.ops.exp(s)"), reduction=reduction)
    assert _fixes(evidence)["stable_softmax"].rewrite == (
        "e = keras.ops.exp(s - keras.ops.take(keras.ops.segment_max(s, receivers, "
        "num_segments=num_nodes), receivers, axis=0))",
    )


def test_a_scatter_add_with_no_count_counts_its_segments(make_evidence):
    reduction = Reduction("segment", "UnsortedSegmentSum", segment_ids="idx")
    evidence = _with(make_evidence(code="e = tf.exp(a)"), reduction=reduction)
    assert (
        "tf.math.unsorted_segment_max(a, idx, tf.reduce_max(idx) + 1)"
        in (_fixes(evidence)["stable_softmax"].rewrite[0])
    )


def test_a_masked_softmax_shifts_by_the_largest_kept_entry_and_sends_masked_ones_to_minus_inf(
    make_evidence,
):
    reduction = Reduction("axis", "Sum", axis=-1, mask="mask")
    evidence = _with(make_evidence(code="e = tf.exp(scores) * mask"), reduction=reduction)
    stable = _fixes(evidence)["stable_softmax"]
    kept_max = 'tf.reduce_max(tf.where(mask != 0, scores, float("-inf")), axis=-1, keepdims=True)'
    assert stable.rewrite == (
        f'e = tf.exp(tf.where(mask != 0, scores - {kept_max}, float("-inf"))) * mask',
    )
    assert "largest unmasked entry" in stable.title
    assert "gradient_doctor.ops.stable_softmax(scores, axis=-1, mask=mask != 0)" in stable.code


def test_a_torch_line_is_offered_the_torch_drop_ins_with_their_dim(make_evidence):
    masked = Reduction("axis", "Sum", axis=-1, mask="mask")
    evidence = _with(make_evidence(code="e = torch.exp(scores) * mask"), reduction=masked)
    code = _fixes(evidence)["stable_softmax"].code
    assert "# gradient_doctor.torch.ops.stable_softmax(scores, dim=-1, mask=mask != 0)" in code
    evidence = _with(make_evidence(code="e = torch.exp(scores)"), reduction=SEGMENTS)
    code = _fixes(evidence)["stable_softmax"].code
    assert (
        "# gradient_doctor.torch.ops.stable_segment_softmax(scores, receivers, num_nodes)" in code
    )


def test_a_where_mask_keeps_its_own_condition_along_its_axis(make_evidence):
    reduction = Reduction("axis", "Sum", axis=2, mask="valid[:, None, :]", mask_is_condition=True)
    code = "w = tf.where(valid[:, None, :], tf.exp(att), 0.0)"
    stable = _fixes(_with(make_evidence(code=code), reduction=reduction))["stable_softmax"]
    assert stable.rewrite[0].startswith(
        "w = tf.where(valid[:, None, :], tf.exp(tf.where(valid[:, None, :], att - "
        'tf.reduce_max(tf.where(valid[:, None, :], att, float("-inf")), axis=2, keepdims=True)'
    )


def test_minus_inf_written_before_exp_gets_a_max_that_ignores_it(make_evidence, make_stats):
    masked_input = dataclasses.replace(make_stats(max=95.0, inf=6), neg_inf=6)
    code = 'e = tf.exp(tf.where(keep, s, float("-inf")))'
    evidence = make_evidence(code=code, inputs=(masked_input,))
    shifted = _fixes(evidence)["stable_softmax"].rewrite[0]
    # A call needs no brackets to be subtracted from; a row of only -inf shifts by the
    # lowest float, not by -inf (-inf - -inf would be NaN).
    assert shifted == (
        'e = tf.exp(tf.where(keep, s, float("-inf")) - tf.maximum(tf.reduce_max('
        'tf.where(keep, s, float("-inf")), axis=-1, keepdims=True), tf.float32.min))'
    )
    # No -inf seen: no guard.
    assert "tf.maximum" not in _fixes(make_evidence(code=code))["stable_softmax"].rewrite[0]


def test_the_lowest_value_is_spelled_for_numpy_keras_and_half_precision():
    reduction = Reduction("axis", "Sum", axis=1)
    numpy = stable_softmax("e = np.exp(z)", reduction, None, dtype_limits("float64"), True)
    assert (
        "np.maximum(np.max(z, axis=1, keepdims=True), np.finfo(np.float64).min)"
        in (numpy.rewrite[0])
    )
    keras = stable_softmax("e = ops.exp(z)", reduction, None, dtype_limits("float16"), True)
    assert "ops.maximum(ops.max(z, axis=1, keepdims=True), -6e4)" in keras.rewrite[0]


def test_a_one_line_softmax_over_a_middle_axis_shifts_along_that_axis(make_evidence):
    # Nothing from the replay: the axis of the line's own sum of the same exp is taken.
    code = "w = tf.exp(scores) / tf.reduce_sum(tf.exp(scores), axis=1, keepdims=True)"
    evidence = make_evidence(code=code, reduction_axis=None)
    stable = _fixes(evidence)["stable_softmax"]
    shift = "scores - tf.reduce_max(scores, axis=1, keepdims=True)"
    assert stable.rewrite == (
        f"w = tf.exp({shift}) / tf.reduce_sum(tf.exp({shift}), axis=1, keepdims=True)",
    )
    assert stable.code.splitlines()[-1] == "w = tf.nn.softmax(scores, axis=1)"
    # The replay's axis wins over the line's.
    replayed = _with(evidence, reduction=Reduction("axis", "Sum", axis=2))
    assert "axis=2, keepdims=True))" in _fixes(replayed)["stable_softmax"].rewrite[0]


def test_a_ragged_rows_sum_shifts_along_its_axis(make_evidence):
    ragged = Reduction("axis", "UnsortedSegmentSum", axis=1, function="tf.reduce_sum")
    evidence = _with(make_evidence(code="e = tf.exp(r)"), reduction=ragged)
    assert _fixes(evidence)["stable_softmax"].rewrite == (
        "e = tf.exp(r - tf.reduce_max(r, axis=1, keepdims=True))",
    )


def test_the_explanation_says_which_groups_the_exp_is_summed_over(make_evidence):
    line = SourceLine("gnn.py", 37, "total = tf.math.unsorted_segment_sum(e, receivers, num_nodes)")
    segments = dataclasses.replace(SEGMENTS, source=line)
    explanation = diagnose(_with(make_evidence(), reduction=segments)).explanation
    assert "reached 712.4; float32 exp overflows above 88.72" in explanation
    assert explanation.endswith(
        "Its values are then summed per segment of `receivers` "
        "(`tf.math.unsorted_segment_sum`, line 37)."
    )
    masked = Reduction("axis", "Sum", axis=-1, mask="valid", mask_is_condition=True)
    explanation = diagnose(_with(make_evidence(), reduction=masked)).explanation
    assert explanation.endswith("Its values are then kept where `valid` and summed along axis -1.")
    assert "Its values are then" not in diagnose(make_evidence()).explanation  # axis alone
