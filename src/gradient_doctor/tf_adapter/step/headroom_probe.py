"""Find the user's risky ops in a traced step and measure, in the step, how close they run."""

from __future__ import annotations

import linecache
import math
from dataclasses import dataclass

import tensorflow as tf

from gradient_doctor.core.dtype_limits import dtype_limits
from gradient_doctor.core.knowledge.layer_groups import layer_of_name
from gradient_doctor.core.records import HeadroomSample
from gradient_doctor.core.source_frames import display_path, is_user_file
from gradient_doctor.tf_adapter.localize.reductions import AXIS_REDUCTIONS

# op type -> (kind, index of the input whose extreme is measured). The domain edges of
# log, sqrt and division (a smallest input of 0) are not measured yet: a tiny but
# positive input (a softmax probability of 1e-30) is harmless there, and a plain
# distance to 0 cannot tell it from one about to cross.
RISKY_OPS: dict[str, tuple[str, int]] = {
    "Exp": ("max_input", 0),
    "Expm1": ("max_input", 0),
    "Acos": ("abs_input", 0),
    "Asin": ("abs_input", 0),
}
_TENSORFLOW_DIR = "/tensorflow/"


@dataclass(frozen=True)
class Probe:
    """One risky op of the user's: what is measured and where it was written."""

    key: str
    op: str
    layer: str | None
    file: str
    line: int
    code: str
    dtype: str
    kind: str
    limit: float
    reduction_axis: int | None = None


def _created_by_user(op):
    """The user's frame when the user called the op directly or through TensorFlow.

    An op made inside another library (a Keras layer's own softmax, a loss) is that
    library's concern: those shift their inputs and must not raise false alarms.
    """
    for frame in reversed(op.traceback):
        if _TENSORFLOW_DIR in frame.filename.replace("\\", "/"):
            continue
        return frame if is_user_file(frame.filename) else None
    return None


def _limit(kind: str, dtype: str) -> float:
    return dtype_limits(dtype).exp_limit if kind == "max_input" else 1.0


def _reduction_axis(op) -> int | None:
    """The one axis along which the op's output is reduced next, as written, or None."""
    output = op.outputs[0]
    for consumer in output.consumers():
        if consumer.type in AXIS_REDUCTIONS and consumer.inputs[0] is output:
            axes = tf.get_static_value(consumer.inputs[1])
            if axes is not None and getattr(axes, "size", 0) == 1:
                return int(axes.reshape(-1)[0])
    return None


def find_probes(graph) -> list[tuple[Probe, tf.Tensor]]:
    """The user's risky ops in `graph`, each with the scalar that measures its extreme."""
    found = []
    for op in graph.get_operations():
        spec = RISKY_OPS.get(op.type)
        if spec is None or not op.outputs or not op.outputs[0].dtype.is_floating:
            continue
        kind, index = spec
        frame = _created_by_user(op)
        if frame is None or index >= len(op.inputs):
            continue
        values = tf.cast(op.inputs[index], tf.float32)
        measured = tf.reduce_max(values if kind == "max_input" else tf.abs(values))
        dtype = op.outputs[0].dtype.name
        layer = layer_of_name(op.name) if "/" in op.name else None
        probe = Probe(
            key=op.name,
            op=op.type,
            layer=layer,
            file=display_path(frame.filename),
            line=frame.lineno,
            code=linecache.getline(frame.filename, frame.lineno).strip(),
            dtype=dtype,
            kind=kind,
            limit=_limit(kind, dtype),
            reduction_axis=_reduction_axis(op),
        )
        found.append((probe, measured))
    return found


def samples(measured: list[tuple[Probe, float]]) -> tuple[HeadroomSample, ...]:
    """One step's measured values as core records (non-finite values are left out)."""
    return tuple(
        HeadroomSample(
            key=p.key,
            op=p.op,
            layer=p.layer,
            file=p.file,
            line=p.line,
            code=p.code,
            dtype=p.dtype,
            kind=p.kind,
            value=float(v),
            limit=p.limit,
            reduction_axis=p.reduction_axis,
        )
        for p, v in measured
        if math.isfinite(float(v))
    )
