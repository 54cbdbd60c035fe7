"""Swap one of the user's ops for its safe version while a step is traced again.

A fix trial has to run the user's step with the fix in place, without editing the
user's file. The origin op is known by its type and the user's source line; while
the step is traced afresh, a graph op callback watches every op created and, for
the op of that type made on that line, hands back the outputs of the safe version
(from `gradient_doctor.ops`) computed from the same inputs. Everything downstream,
the gradients included, then uses the safe outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import tensorflow as tf
from tensorflow.python.eager import execute
from tensorflow.python.framework import op_callbacks

from gradient_doctor import ops as safe_ops
from gradient_doctor.core.findings import SourceLine
from gradient_doctor.ops._softmax import _finite_max
from gradient_doctor.tf_adapter.source_frames import display_path, is_user_file

Replacement = Callable[..., tf.Tensor]

_DIVISIONS = frozenset({"RealDiv", "Div", "DivNoNan"})
_RECIPROCALS = frozenset({"Reciprocal", "Inv"})
# Fix family -> the forward op types whose safe version that family is.
_FAMILY_OPS: dict[str, frozenset[str]] = {
    "stable_softmax": frozenset({"Exp"}),
    "safe_norm": frozenset({"Sqrt"}),
    "safe_sqrt": frozenset({"Sqrt"}),
    "safe_log": frozenset({"Log"}),
    "safe_div": _DIVISIONS | _RECIPROCALS,
    "safe_acos": frozenset({"Acos"}),
    "safe_asin": frozenset({"Asin"}),
    "safe_where": frozenset({"Sqrt", "Log", "Acos", "Asin"}) | _DIVISIONS | _RECIPROCALS,
    "clip_input_domain": frozenset({"Sqrt", "Log", "Acos", "Asin"}),
}


def safe_version(family: str, op_type: str, reduction_axis: int | None) -> Replacement | None:
    """The safe computation that `family` puts in place of an `op_type` op, or None.

    Args:
        family: a fix family id (`FIX_FAMILIES`).
        op_type: the forward op's type, e.g. "Exp".
        reduction_axis: the axis a hand-written softmax sums the op's output over;
            a max-shift of `exp` is only the same softmax along that axis.
    """
    if op_type not in _FAMILY_OPS.get(family, ()):
        return None
    if op_type == "Exp":
        if reduction_axis is None:
            return None
        return lambda x: tf.exp(x - _finite_max(x, reduction_axis))
    if op_type == "Sqrt":
        return safe_ops.safe_sqrt
    if op_type == "Log":
        return safe_ops.safe_log
    if op_type in _DIVISIONS:
        return safe_ops.safe_div
    if op_type in _RECIPROCALS:
        return lambda x: safe_ops.safe_div(tf.ones_like(x), x)
    return safe_ops.safe_acos if op_type == "Acos" else safe_ops.safe_asin


def _user_frame_of(op) -> tuple[str, int] | None:
    """(file as displayed, line) of the innermost user frame that created `op`."""
    for frame in reversed(op.traceback):
        if is_user_file(frame.filename):
            return display_path(frame.filename), frame.lineno
    return None


@contextmanager
def substituted(op_type: str, source: SourceLine, replacement: Replacement) -> Iterator[list]:
    """While the block traces a step, compute `op_type` ops made on `source` safely.

    Yields a list that collects the name of every op replaced (empty when the
    op was not met, e.g. the line is not reached in the new trace).
    """
    replaced: list[str] = []
    safe_outputs: set[int] = set()
    where = (source.file, source.line)

    def callback(seen_type, inputs, attrs, outputs, op_name=None, graph=None):
        if graph is None or seen_type != op_type or not outputs:
            return None
        if _user_frame_of(outputs[0].op) != where:
            return None
        replaced.append(op_name)
        safe = replacement(*inputs)
        safe_outputs.add(id(safe))
        return [safe]

    # After the callback, TensorFlow records the op for the tape under its own type
    # with the outputs the callback returned (`Sqrt` with the safe result): the
    # tape would then differentiate `sqrt` again. The safe ops recorded themselves
    # already, so that record is dropped.
    original_record = execute.record_gradient

    def record_gradient(op_name, inputs, attrs, outputs):
        if any(id(t) in safe_outputs for t in outputs):
            return None
        return original_record(op_name, inputs, attrs, outputs)

    op_callbacks.add_op_callback(callback)
    execute.record_gradient = record_gradient
    try:
        yield replaced
    finally:
        execute.record_gradient = original_record
        op_callbacks.remove_op_callback(callback)
