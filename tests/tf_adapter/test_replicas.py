"""Where replicas run, and the exact byte encoding that sends a failing shard between workers."""

import numpy as np
import pytest
import tensorflow as tf

from gradient_doctor.tf_adapter.step import replicas

CLUSTER = replicas.Layout(6, (("chief", 0), ("worker", 0), ("worker", 1)), ("worker", 1))


@pytest.mark.parametrize(
    ("replica", "task"),
    [(0, ("chief", 0)), (1, ("chief", 0)), (2, ("worker", 0)), (5, ("worker", 1)), (6, None)],
)
def test_each_replica_belongs_to_the_task_that_runs_it(replica, task):
    assert CLUSTER.task_of(replica) == task  # MultiWorkerMirroredStrategy numbers the chief first


def test_one_machine_has_no_tasks_and_no_worker_note():
    here = replicas.layout()
    assert (here.tasks, here.this_task, here.task_of(0)) == ((), None, None)
    assert replicas.worker_note(0, here) == ""


def test_the_worker_note_says_who_ran_the_replica_and_whose_report_it_is():
    note = replicas.worker_note(3, CLUSTER)
    assert "ran on task worker:0 (worker 1 of 3)" in note
    assert note.endswith("This report is task worker:1's.")


@pytest.mark.parametrize(
    "value",
    [
        np.array([np.nan, -0.0, np.inf, -np.inf, 1.5, 3e-45], np.float32),
        np.array([[-0.0, np.nan], [1e300, 5e-324]], np.float64),
        np.array([65504.0, -0.0, np.nan], np.float16),
        np.array([True, False, True]),
        np.array([-128, 0, 127], np.int8),
        np.array([2**63 - 1, -(2**63)], np.int64),
        np.array([1 + 2j, np.nan - 0.0j], np.complex64),
        np.float32(-0.0),
    ],
)
def test_bytes_summed_with_zeros_give_back_the_same_bits(value):
    tensor = tf.constant(value)
    encoded = replicas._as_bytes(tensor)
    summed = encoded + tf.zeros_like(encoded) + tf.zeros_like(encoded)  # two workers' zeros
    decoded = replicas._from_bytes(summed, tensor.dtype).numpy()
    assert decoded.dtype == value.dtype and decoded.shape == np.shape(value)
    assert np.asarray(decoded).tobytes() == np.asarray(value).tobytes()


def test_without_a_strategy_the_copies_are_the_variables_themselves():
    variable = tf.Variable([1.0, 2.0])
    assert replicas.replica_copies([variable], 0) == [variable]
