"""Rewrite a line that leaves TensorFlow (`.numpy()`, `np.*`) into ops the tape records."""

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
_TO_NUMPY = re.compile(r"\.numpy\(\)")


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
    text = _unwrap_conversions(text)
    text = _respell_numpy(text)
    return text if text != code else None


def _unwrap_conversions(text: str) -> str:
    match = _CONVERSIONS.search(text)
    while match is not None:
        call = find_call(text[match.start() :], (match.group(1),))
        if call is None or not call.args:
            break
        start = match.start()
        text = replace_span(text, start + call.start, start + call.end, call.args[0])
        match = _CONVERSIONS.search(text)
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
