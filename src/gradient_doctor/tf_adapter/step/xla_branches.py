"""Keep the doctor's `tf.cond` branches real conditionals when XLA compiles for a CPU.

XLA's conditional simplifier turns a two-branch conditional whose instructions are
all elementwise (or reductions, slices, broadcasts...) into `select`s: both branches
then run on every step. An optimizer's update is such a branch (Adam is elementwise),
and so are the sampled per-layer statistics (reductions). As selects, the guarded
update costs a copy of every moment slot per step (the old value must outlive the
in-place write of the new one), and the statistics meant for one step in ten are
computed on every step. For the benchmark's MLP under `jit_compile=True` on this
2-core CPU, the watched compiled step cost 1.17-1.21x plain with selects, 1.05-1.07x
with conditionals (cheap mode, steps interleaved one by one).

An optimization barrier is not elementwise, so one barrier on a value the branch
writes keeps the conditional, and the untaken branch costs nothing. On a GPU the
selects are left alone: there a real conditional copies its predicate to the host
(a synchronisation per step), while the selects run at memory bandwidth.
"""

from __future__ import annotations

import functools

import tensorflow as tf

from gradient_doctor.tf_adapter._tf_internals import control_flow_util


def compiled_with_xla() -> bool:
    """True while tracing a step that XLA compiles (`jit_compile=True`)."""
    if tf.executing_eagerly():
        return False
    return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))


def branches_kept() -> bool:
    """True when `keep_branch` marks values in the step being traced (XLA on a CPU)."""
    return compiled_with_xla() and not _gpu_present() and _optimization_barrier() is not None


def keep_branch(value: tf.Tensor) -> tf.Tensor:
    """`value`, marked so that XLA on a CPU keeps the branch computing it a conditional.

    Call it on a tensor that the branch writes to a variable (or returns to a
    caller that uses it): a value nobody reads is removed, barrier and all.
    Where `branches_kept()` is False, `value` is returned unchanged.
    """
    if not branches_kept():
        return value
    return _optimization_barrier()([value])[0]


@functools.cache
def _gpu_present() -> bool:
    return bool(tf.config.list_logical_devices("GPU"))


@functools.cache
def _optimization_barrier():
    """TensorFlow's op for XLA's optimization barrier, or None where it is missing."""
    try:
        from tensorflow.compiler.tf2xla.ops import gen_xla_ops
    except ImportError:  # pragma: no cover - present in every TF 2 wheel checked
        return None
    return getattr(gen_xla_ops, "xla_optimization_barrier", None)
