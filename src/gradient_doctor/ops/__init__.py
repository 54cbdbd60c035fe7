"""Numerically safe drop-ins for TensorFlow ops, with finite gradients at their singular points.

Each works eagerly, in `tf.function` and under XLA (`jit_compile=True`), and keeps
its input's dtype (float16, bfloat16, float32, float64).

Example:
    >>> from gradient_doctor import ops
    >>> penalty = (ops.safe_norm(gradients, axis=-1) - 1.0) ** 2
"""

from gradient_doctor.ops._division import safe_div
from gradient_doctor.ops._log import safe_log
from gradient_doctor.ops._norm import safe_norm
from gradient_doctor.ops._roots import safe_sqrt
from gradient_doctor.ops._softmax import stable_logsumexp, stable_segment_softmax, stable_softmax
from gradient_doctor.ops._trig import safe_acos, safe_asin
from gradient_doctor.ops._where import safe_where

__all__ = [
    "safe_acos",
    "safe_asin",
    "safe_div",
    "safe_log",
    "safe_norm",
    "safe_sqrt",
    "safe_where",
    "stable_logsumexp",
    "stable_segment_softmax",
    "stable_softmax",
]
