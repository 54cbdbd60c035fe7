"""The ring of earlier good states: what it keeps, and that a copy is the value it had then."""

import numpy as np
import tensorflow as tf

from gradient_doctor.tf_adapter.trials.snapshots import SnapshotRing


def test_a_copy_holds_the_value_from_when_it_was_taken_after_later_updates():
    variable = tf.Variable(tf.fill((256, 256), 1.0))
    ring = SnapshotRing(every=2, keep=2)
    ring.before_first_step(lambda: [variable])
    for step in range(6):
        variable.assign_add(tf.ones_like(variable))  # the step's in-place update
        ring.after_finite_step(step, lambda: [variable])
    assert [s.step for s in ring.saved()] == [0, 4, 6]  # the start, and the latest two
    values = {s.step: s.values[0][1] for s in ring.saved()}
    assert isinstance(values[4], np.ndarray)  # moved to host memory
    np.testing.assert_array_equal(values[0], 1.0)
    np.testing.assert_array_equal(values[4], 5.0)
    np.testing.assert_array_equal(values[6], 7.0)


def test_kept_batches_run_from_a_start_and_stay_within_the_budget(monkeypatch):
    from gradient_doctor.tf_adapter.trials import snapshots

    monkeypatch.setattr(snapshots, "BATCH_BUDGET_BYTES", 3 * 4 * 10)
    ring = SnapshotRing(every=100)
    for step in range(5):
        batch = ((np.full(10, step, np.float32),), {})
        ring.after_finite_step(step, lambda: [], batch)
    kept, complete = ring.batches_from(2)
    assert [int(args[0][0]) for args, _ in kept] == [2, 3, 4]
    assert complete
    kept, complete = ring.batches_from(0)  # the first two were let go
    assert not complete and len(kept) == 3


def test_a_loop_of_two_step_functions_keeps_no_batches_for_either_ones_trials():
    # A GAN loop calls d_step(real) then g_step(64): g_step's argument is no batch of
    # d_step, and a trial of d_step fed it would trace d_step on a scalar.
    def d_step(real):
        return real

    def g_step(count):
        return count

    ring = SnapshotRing(every=100)
    for step in range(4):
        function, args = (d_step, (np.ones(3, np.float32),)) if step % 2 == 0 else (g_step, (64,))
        ring.after_finite_step(step, lambda: [], (args, {}, function))
    assert ring.batches_from(0, d_step) == ([], False)
    assert ring.batches_from(3, g_step) == ([((64,), {})], True)


def test_a_start_copy_taken_before_the_model_was_built_gives_way_to_the_first_full_one():
    # A subclassed model without an `Input` makes its weights inside its first step:
    # the copy before that step holds only what existed then (here, a step counter).
    counter = tf.Variable(0, trainable=False)
    ring = SnapshotRing(every=50)
    ring.before_first_step(lambda: [counter])
    weights = tf.Variable(tf.fill((4,), 1.0))  # built by the first step
    weights.assign_add(tf.ones_like(weights))  # and updated by it
    counter.assign_add(1)
    ring.after_finite_step(0, lambda: [counter, weights])
    assert [s.step for s in ring.saved()] == [1]  # not "the state before step 0"
    np.testing.assert_array_equal(dict((id(v), x) for v, x in ring.first.values)[id(weights)], 2.0)
    weights.assign_add(tf.ones_like(weights))
    ring.after_finite_step(1, lambda: [counter, weights])
    assert [s.step for s in ring.saved()] == [1]  # kept for good from there


def test_a_start_copy_holding_every_trained_variable_is_kept():
    weights = tf.Variable(tf.fill((4,), 1.0))
    ring = SnapshotRing(every=50)
    ring.before_first_step(lambda: [weights])
    slot = tf.Variable(tf.zeros((4,)), trainable=False)  # an optimizer's, made at its update
    weights.assign_add(tf.ones_like(weights))
    ring.after_finite_step(0, lambda: [weights, slot])
    assert [s.step for s in ring.saved()] == [0]
