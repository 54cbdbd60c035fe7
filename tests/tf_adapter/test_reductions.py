"""The reduction a replayed exp's output flows into, read from real replays, and the
max-shift written from it: the patched code computes the same softmax, finite."""

import inspect
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from gradient_doctor.core.dtype_limits import dtype_limits
from gradient_doctor.core.knowledge.rewrites.exp import stable_softmax
from gradient_doctor.core.summed_groups import find_reduction
from gradient_doctor.tf_adapter.localize.reductions import TensorflowReductions
from gradient_doctor.tf_adapter.localize.replay import replay_step
from gradient_doctor.tf_adapter.localize.step_context import StepCall

RECEIVERS = tf.constant([0, 2, 0, 2, 2])  # node 1 receives nothing
NODES = 3
MASK = tf.constant([[1.0, 0.0, 1.0, 1.0]])
KEEP = tf.constant([[True, True, False, True]])


def unsorted_segments(scores):
    e = tf.exp(scores)
    total = tf.math.unsorted_segment_sum(e, RECEIVERS, num_segments=NODES)
    return e / tf.gather(total, RECEIVERS)


def sorted_segments(scores):
    ids = tf.sort(RECEIVERS)
    e = tf.exp(scores)
    return e / tf.gather(tf.math.segment_sum(e, ids), ids)


def scatter_add(scores):
    e = tf.exp(scores)
    total = tf.tensor_scatter_nd_add(tf.zeros([NODES], e.dtype), RECEIVERS[:, None], e)
    return e / tf.gather(total, RECEIVERS)


def scatter_nd(scores):
    e = tf.exp(scores)
    return e / tf.gather(tf.scatter_nd(tf.expand_dims(RECEIVERS, 1), e, [NODES]), RECEIVERS)


def keras_segments(scores):
    import keras

    e = keras.ops.exp(scores)
    total = keras.ops.segment_sum(e, RECEIVERS, num_segments=NODES)
    return e / keras.ops.take(total, RECEIVERS, axis=0)


def split_call(scores):
    e = tf.exp(scores)
    total = tf.math.unsorted_segment_sum(
        e,
        RECEIVERS,
        NODES,
    )
    return e / tf.gather(total, RECEIVERS)


def masked_product(scores):
    e = tf.exp(scores) * tf.cast(MASK, scores.dtype)
    return e / (tf.reduce_sum(e, axis=-1, keepdims=True) + 1e-9)


def masked_where(scores):
    e = tf.where(KEEP, tf.exp(scores), 0.0)
    return e / tf.reduce_sum(e, axis=-1, keepdims=True)


def minus_infinity_mask(scores):
    e = tf.exp(tf.where(KEEP, scores, float("-inf")))
    return e / (tf.reduce_sum(e, axis=-1, keepdims=True) + 1e-9)


def one_line_middle_axis(scores):
    return tf.exp(scores) / tf.reduce_sum(tf.exp(scores), axis=1, keepdims=True)


def ragged_rows(scores):
    r = tf.RaggedTensor.from_value_rowids(scores, [0, 0, 1, 1, 1])
    e = tf.exp(r)
    return (e / tf.reduce_sum(e, axis=1, keepdims=True)).flat_values


def weighted_sum(scores):
    e = tf.exp(scores)
    return tf.reduce_sum(e * tf.constant([[1.0, 2.0, 3.0, 4.0]]), axis=-1)


def _replayed_exp(fn, scores, compiled):
    step = tf.function(fn) if compiled else fn
    result = replay_step(StepCall(step, (tf.constant(scores),)))
    (exp,) = [e for e in result.events if e.op_type == "Exp"][:1]
    return result, exp


SEGMENT_SCORES = [500.0, 1.0, 499.0, -2.0, 3.0]
ROW_SCORES = [[300.0, 600.0, 299.0, 2.0]]  # 600 is masked: float64 holds its exp


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "function"])
@pytest.mark.parametrize(
    ("fn", "kind", "ids", "count"),
    [
        (unsorted_segments, "segment", "RECEIVERS", "NODES"),
        (sorted_segments, "sorted_segment", "ids", None),
        (scatter_add, "segment", "RECEIVERS", "NODES"),
        (scatter_nd, "segment", "tf.expand_dims(RECEIVERS, 1)[:, 0]", "NODES"),
        (keras_segments, "segment", "RECEIVERS", "NODES"),
        (split_call, "segment", "RECEIVERS", "NODES"),
    ],
)
def test_segment_sums_name_the_users_ids_and_count(fn, kind, ids, count, compiled):
    result, exp = _replayed_exp(fn, SEGMENT_SCORES, compiled)
    reduction = find_reduction(result.events, exp, TensorflowReductions(result.tensors))
    assert (reduction.kind, reduction.segment_ids, reduction.num_segments) == (kind, ids, count)
    assert reduction.axis is None and reduction.mask is None
    assert reduction.source.line == _line_of(fn, reduction.function + "(")


@pytest.mark.parametrize(
    ("fn", "axis", "mask", "condition"),
    [
        (masked_product, -1, "tf.cast(MASK, scores.dtype)", False),
        (masked_where, -1, "KEEP", True),
        (minus_infinity_mask, -1, None, False),
        (one_line_middle_axis, 1, None, False),
        (ragged_rows, 1, None, False),
    ],
)
def test_axis_sums_name_the_axis_and_the_mask_on_the_way(fn, axis, mask, condition):
    scores = SEGMENT_SCORES if fn is ragged_rows else ROW_SCORES
    if fn is one_line_middle_axis:
        scores = [[[1.0], [2.0]]]
    result, exp = _replayed_exp(fn, scores, compiled=True)
    reduction = find_reduction(result.events, exp, TensorflowReductions(result.tensors))
    assert (reduction.kind, reduction.axis, reduction.mask) == ("axis", axis, mask)
    assert reduction.mask_is_condition is condition


def test_a_product_with_weights_without_zeros_is_no_mask_and_a_broadcast_is_not_followed():
    result, exp = _replayed_exp(weighted_sum, ROW_SCORES, compiled=False)
    reduction = find_reduction(result.events, exp, TensorflowReductions(result.tensors))
    assert (reduction.axis, reduction.mask) == (-1, None)

    def broadcast(scores):  # (1, 4, 1) * (1, 1, 4): the sum runs over another tensor
        return tf.reduce_sum(tf.exp(scores) * tf.ones([1, 1, 4]), axis=1)

    result, exp = _replayed_exp(broadcast, [[[1.0], [2.0], [3.0], [4.0]]], compiled=False)
    assert find_reduction(result.events, exp, TensorflowReductions(result.tensors)) is None


@pytest.mark.parametrize(
    ("fn", "scores"),
    [
        (unsorted_segments, SEGMENT_SCORES),
        (sorted_segments, SEGMENT_SCORES),
        (scatter_add, SEGMENT_SCORES),
        (scatter_nd, SEGMENT_SCORES),
        (keras_segments, SEGMENT_SCORES),
        (masked_product, ROW_SCORES),
        (masked_where, ROW_SCORES),
        (minus_infinity_mask, [[300.0, 2.0, 900.0, 299.0], [1.0, 2.0, 3.0, 4.0]]),
        (one_line_middle_axis, [[[500.0], [499.0]], [[1.0], [3.0]]]),
        (ragged_rows, SEGMENT_SCORES),
    ],
)
def test_the_shift_written_from_the_replay_keeps_the_softmax_and_stays_finite(fn, scores):
    result, exp = _replayed_exp(fn, scores, compiled=False)
    reduction = find_reduction(result.events, exp, TensorflowReductions(result.tensors))
    minus_infinity = exp.inputs[0].neg_inf > 0
    source = exp.source
    fix = stable_softmax(
        source.code, reduction, source.span, dtype_limits("float32"), minus_infinity
    )
    patched = _patched(fn, source.code, fix.rewrite[0])
    original = np.asarray(fn(tf.constant(scores, tf.float64)))  # float64 does not overflow
    value = np.asarray(patched(tf.constant(scores)))
    assert np.isfinite(value).all(), fix.rewrite[0]
    np.testing.assert_allclose(value, original, rtol=1e-5, atol=1e-6)
    assert not np.isfinite(np.asarray(fn(tf.constant(scores)))).all()  # the original overflows


def test_a_fully_masked_row_stays_finite_under_the_masked_shift():
    rows = tf.constant([[900.0, 5.0, 1.0, 2.0], [1.0, 2.0, 3.0, 4.0]])
    for fn, mask in ((masked_product, tf.zeros([2, 4])), (minus_infinity_mask, None)):
        result, exp = _replayed_exp(fn, rows.numpy().tolist(), compiled=False)
        reduction = find_reduction(result.events, exp, TensorflowReductions(result.tensors))
        source = exp.source
        fix = stable_softmax(source.code, reduction, source.span, dtype_limits("float32"), True)
        patched = _patched(fn, source.code, fix.rewrite[0])
        names = {"MASK": mask} if mask is not None else {"KEEP": tf.zeros([2, 4], tf.bool)}
        values = _with_globals(patched, names)(rows)
        # Nothing is kept: every weight is 0 (the shift made no inf * 0 nor -inf - -inf).
        np.testing.assert_array_equal(np.asarray(values), np.zeros([2, 4]), fix.rewrite[0])


def _line_of(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    (offset,) = [i for i, line in enumerate(lines) if text in line][:1]
    return first + offset


def _patched(fn, old: str, new: str):
    """`fn` compiled again from its source with its line `old` replaced by `new`."""
    source = textwrap.dedent(inspect.getsource(fn))
    assert source.count(old) == 1, old
    namespace = dict(fn.__globals__)
    exec(compile(source.replace(old, new), inspect.getsourcefile(fn), "exec"), namespace)
    return namespace[fn.__name__]


def _with_globals(fn, names: dict):
    namespace = {**fn.__globals__, **names}
    return type(fn)(fn.__code__, namespace, fn.__name__)
