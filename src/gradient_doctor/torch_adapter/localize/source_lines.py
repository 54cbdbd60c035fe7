"""The user's own line of an op running now: the innermost frame outside torch and the doctor."""

from __future__ import annotations

import ast
import linecache
import os
import sys
from functools import lru_cache

import torch

from gradient_doctor.core import source_frames
from gradient_doctor.core.findings import SourceLine

# torch's own package, wherever it is installed (a source build lies outside site-packages).
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


@lru_cache(maxsize=4096)
def is_user_file(filename: str) -> bool:
    """Whether `filename` is the user's code: not torch's, a library's or the doctor's."""
    return source_frames.is_user_file(filename) and not os.path.abspath(filename).startswith(
        _TORCH_DIR
    )


def user_line() -> SourceLine | None:
    """The user's line on the current stack (with the expression that is running)."""
    return source_frames.user_line(sys._getframe(1), is_user_file)


# Context managers that turn gradients off for their block, as scripts spell them.
_GRADIENTS_OFF = frozenset({"no_grad", "inference_mode"})


def line_in_gradients_off_block() -> SourceLine | None:
    """The user's line, on the current stack, that lies inside a `with torch.no_grad():`
    (or `torch.inference_mode()`, `torch.set_grad_enabled(False)`) block of its file:
    the call that ran the ops gradients were off for, which may be a module's forward
    several frames in (`feats = self.encoder(x)` under the block, not the convolution
    inside the encoder). None when no frame is inside such a block (a decorator, or
    gradients turned off elsewhere)."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if is_user_file(filename) and frame.f_lineno in _gradients_off_lines(filename):
            return source_frames.user_line(frame, is_user_file)
        frame = frame.f_back
    return None


@lru_cache(maxsize=256)
def _gradients_off_lines(filename: str) -> frozenset[int]:
    """The lines of the bodies of the file's `with` blocks that turn gradients off."""
    try:
        tree = ast.parse(_file_text(filename))
    except (SyntaxError, ValueError):
        return frozenset()
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.With | ast.AsyncWith) and any(
            _turns_gradients_off(item.context_expr) for item in node.items
        ):
            first = node.body[0].lineno
            last = max(statement.end_lineno or statement.lineno for statement in node.body)
            lines.update(range(first, last + 1))
    return frozenset(lines)


def _turns_gradients_off(expression: ast.expr) -> bool:
    """`torch.no_grad()`, `torch.inference_mode()`, `torch.set_grad_enabled(False)`."""
    if not isinstance(expression, ast.Call):
        return False
    function = expression.func
    name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
    if name in _GRADIENTS_OFF:
        return True
    return (
        name == "set_grad_enabled"
        and len(expression.args) == 1
        and isinstance(expression.args[0], ast.Constant)
        and expression.args[0].value is False
    )


def _file_text(filename: str) -> str:
    """The file's text as the running program sees it (linecache)."""
    return "".join(linecache.getlines(filename))
