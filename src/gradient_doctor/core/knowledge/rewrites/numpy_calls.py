"""Rewrite a line that leaves the framework (`.numpy()`, `np.*`) into ops autograd records."""

from __future__ import annotations

import re

from gradient_doctor.core.knowledge.source.calls import find_call, replace_span
from gradient_doctor.core.knowledge.source.spelling import tensorflow_name

_NUMPY_CALL = re.compile(r"(?<![\w.])(?:np|numpy)\.(\w+)\s*\(")
# Calls that only move a value between NumPy and TensorFlow: kept on the tape, they
# are the value itself.
_CONVERSIONS = re.compile(
    r"(?<![\w.])(?:np|numpy|tf)\.(asarray|array|constant|convert_to_tensor)\s*\("
)
# The same in PyTorch: a NumPy array or a tensor's copy made a tensor again.
_TORCH_CONVERSIONS = re.compile(
    r"(?<![\w.])(?:np|numpy|torch)\.(asarray|array|from_numpy|tensor|as_tensor|Tensor)\s*\("
)
_TO_NUMPY = re.compile(r"\.numpy\(\)")
# In PyTorch, the `.detach()` that `.numpy()` needs goes with it (`.cpu()` stays:
# differentiable, it keeps the value where the rest of the line expects it).
_TORCH_TO_NUMPY = re.compile(r"(?:\.detach\(\))?((?:\.cpu\(\))?)(?:\.detach\(\))?\.numpy\(\)")
# The call that makes a tensor of NumPy or Python data, as a PyTorch user writes it.
TORCH_REENTRY_CALLS = ("from_numpy", "tensor", "as_tensor", "Tensor", "FloatTensor")


def stay_in_tensorflow(code: str) -> str | None:
    """Rewrite `code` without its round trips through NumPy.

    `.numpy()` is dropped, `np.asarray(x)`, `np.array(x)`, `tf.constant(x)` and
    `tf.convert_to_tensor(x)` become `x`, and NumPy functions with a TensorFlow
    counterpart are respelled (`np.clip` -> `tf.clip_by_value`).

    Args:
        code: str, one line of the user's code.

    Returns:
        The rewritten line, or None when it has nothing to rewrite.
    """
    text = _TO_NUMPY.sub("", code)
    text = _unwrap_conversions(text, _CONVERSIONS)
    text = _respell_numpy(text)
    return text if text != code else None


def stay_in_torch(code: str) -> str | None:
    """Rewrite `code` without its round trips through NumPy, in PyTorch.

    `.detach().numpy()` and `.detach().cpu().numpy()` are dropped (`.cpu()` kept), and
    `torch.from_numpy(x)`, `torch.tensor(x)`, `torch.as_tensor(x)` and `np.asarray(x)`
    become `x` (a call whose argument is a tensor's history, kept).

    Args:
        code: str, one line of the user's code.

    Returns:
        The rewritten line, or None when it has no `.numpy()` to rewrite.
    """
    if _TO_NUMPY.search(code) is None:
        return None
    text = _TORCH_TO_NUMPY.sub(r"\1", code)
    text = _unwrap_conversions(text, _TORCH_CONVERSIONS)
    return text if text != code else None


def _unwrap_conversions(text: str, conversions: re.Pattern[str]) -> str:
    match = conversions.search(text)
    while match is not None:
        call = find_call(text[match.start() :], (match.group(1),))
        if call is None or not call.args:
            break
        start = match.start()
        text = replace_span(text, start + call.start, start + call.end, call.args[0])
        match = conversions.search(text)
    return text


def _respell_numpy(text: str) -> str:
    position = 0
    while (match := _NUMPY_CALL.search(text, position)) is not None:
        name = tensorflow_name(match.group(1))
        if name is None:
            position = match.end()
            continue
        text = text[: match.start()] + name + text[match.end(1) :]
        position = match.start() + len(name)
    return text
