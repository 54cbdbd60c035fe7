"""Where the user compiled a training step, with or without XLA: the line a fix that
turns XLA off edits.

A Keras model's step is compiled as `model.compile(...)` says (`jit_compile=True`, or
"auto", which Keras turns into XLA where a GPU is); under `gradient-doctor run` the
doctor notes the user's line of each `compile` call as it happens. A custom loop's
step is compiled by its decorator, `@tf.function(jit_compile=True)`, found in the
function's own source.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import textwrap
import weakref

import keras

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.source_frames import source_line, statement_line, user_frame

# Model -> the user's line that called its `compile`, as recorded at the call.
_compiled: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def recording_patches() -> list[tuple[type, str, object]]:
    """(owner, attribute, replacement) that records each `Model.compile` call's line;
    the caller installs it and puts the original back. It only notes a line."""
    original_compile = keras.Model.compile

    @functools.wraps(original_compile)
    def compile(model, *args, **kwargs):
        line = statement_line(user_frame(sys._getframe(1)))
        if line is not None:
            _compiled[model] = line
        return original_compile(model, *args, **kwargs)

    return [(keras.Model, "compile", compile)]


def compile_line(model) -> SourceLine | None:
    """The user's line that compiled `model` (its last `compile` call), or None when
    it was compiled before the doctor was installed."""
    try:
        return _compiled.get(model)
    except TypeError:  # not weakly referenceable
        return None


def decorator_line(function) -> SourceLine | None:
    """The decorator that compiles `function` with a `jit_compile` argument
    (`@tf.function(jit_compile=True)`), as a `SourceLine` of its lines; None when
    the function's source cannot be read or no decorator of it says `jit_compile`."""
    function = inspect.unwrap(function)
    code = getattr(function, "__code__", None)
    if code is None:
        return None
    try:
        lines, first = inspect.getsourcelines(function)
    except (OSError, TypeError):
        return None
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))  # a method's source is indented
    except SyntaxError:
        return None
    definition = next(
        (node for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)),
        None,
    )
    if definition is None:
        return None
    for decorator in definition.decorator_list:
        if isinstance(decorator, ast.Call) and any(
            keyword.arg == "jit_compile" for keyword in decorator.keywords
        ):
            start = first + decorator.lineno - 1
            end = first + (decorator.end_lineno or decorator.lineno) - 1
            return source_line(code.co_filename, start, end, None, None)
    return None


def compiled_line(compiled_by) -> SourceLine | None:
    """The line that compiled a step: `compile_line` of a Keras model, `decorator_line`
    of a custom loop's step function; None for anything else."""
    if compiled_by is None:
        return None
    if isinstance(compiled_by, keras.Model):
        return compile_line(compiled_by)
    return decorator_line(compiled_by)
