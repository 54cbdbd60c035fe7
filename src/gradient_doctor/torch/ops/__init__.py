"""Numerically safe drop-ins for PyTorch ops, with finite gradients at their singular points.

The twins of `gradient_doctor.ops` (TensorFlow), written in plain torch ops: each works
on CPU and CUDA tensors, under `torch.func.grad` and `vmap`, with second-order
gradients (`create_graph=True`), and keeps its input's dtype (float16, bfloat16,
float32, float64). Dimensions are named as PyTorch names them (`dim`, `keepdim`).

Example:
    >>> from gradient_doctor.torch import ops
    >>> penalty = (ops.safe_norm(gradients, dim=1) - 1.0) ** 2
"""

from gradient_doctor.torch.ops._division import safe_div
from gradient_doctor.torch.ops._log import safe_log
from gradient_doctor.torch.ops._norm import safe_norm
from gradient_doctor.torch.ops._roots import safe_sqrt
from gradient_doctor.torch.ops._softmax import (
    stable_logsumexp,
    stable_segment_softmax,
    stable_softmax,
)
from gradient_doctor.torch.ops._trig import safe_acos, safe_asin
from gradient_doctor.torch.ops._where import safe_where

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
