"""Where the user created each Keras layer, model and optimizer: the line a fix to it edits.

An op that Keras's own code runs inside a library layer (a `Dense`'s MatMul, an LSTM
cell's ops, a `Normalization`'s subtraction) has no line of the user's own: the line
the user needs is the one that built that layer. Under `gradient-doctor run` the
doctor is installed before the script runs, so `recording_patches` notes, as each
layer, model and optimizer is constructed, the user's frame that constructed it.
Objects built before the doctor saw them (the `Doctor()` callback, `watch()`) are
found in the user's source instead: the one call of the object's class whose
literal arguments agree with the object's config (`Dense(8)` for a layer of 8
units); when several agree, none is named.
"""

from __future__ import annotations

import ast
import functools
import inspect
import math
import os
import sys
import weakref
from dataclasses import dataclass
from types import FrameType

import keras

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.source_frames import (
    is_user_file,
    source_line,
    statement_line,
    user_frame,
    user_line,
)
from gradient_doctor.tf_adapter._tf_internals import (
    BaseOptimizer,
    autograph_origin,
    global_state,
)

LAYER_CREATION = "layer_creation"
_LAYER_CALL = inspect.unwrap(keras.Layer.__call__).__code__
_UNKNOWN = object()  # a literal argument the source does not spell out

# Object -> the user's line that created it, as recorded at construction.
_recorded: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Object -> the line found in the source (None when none or several agreed).
_found: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Keras layer path -> the layer last seen running under it.
_running: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def creation_line(obj) -> SourceLine | None:
    """The user's line that created `obj`, a Keras layer, model or optimizer.

    For a constructor call written over several lines, `line` is its first line,
    `end_line` its last and `code` the first line's text. An object built by Keras
    on the user's behalf (an LSTM's cell, the optimizer `compile(optimizer="adam")`
    makes) has the user's line that led to it.

    Args:
        obj: the layer, model or optimizer.

    Returns:
        The line recorded when `obj` was constructed under `gradient-doctor run`;
        otherwise the one constructor call of its class in the user's source that
        agrees with it; None when there is none or several agree.
    """
    try:
        recorded = _recorded.get(obj)
    except TypeError:  # not weakly referenceable: nothing was recorded for it
        return None
    if recorded is not None:
        return recorded
    if obj not in _found:
        stack, loaded = _source_files()
        # The files on the stack first: one agreeing call there (the script that
        # called `fit`) is the line, even when another loaded module has a twin.
        _found[obj] = _search_source(obj, stack) or _search_source(obj, stack + loaded)
    return _found[obj]


def recording_patches() -> list[tuple[type, str, object]]:
    """(owner, attribute, replacement) for each constructor that records creation lines.

    `Layer.__new__` runs once per layer, model included, before any `__init__`, at
    the user's call (an `__init__` hook would see a subclass's `super().__init__()`
    line instead); optimizers are recorded in `BaseOptimizer.__init__`. The caller
    installs the replacements and puts the originals back; they only note a line.
    """
    original_new = keras.Layer.__dict__["__new__"].__func__
    original_init = BaseOptimizer.__dict__["__init__"]

    @functools.wraps(original_new)
    def new(cls, *args, **kwargs):
        obj = original_new(cls, *args, **kwargs)
        _record(obj, sys._getframe(1))
        return obj

    @functools.wraps(original_init)
    def init(optimizer, *args, **kwargs):
        _record(optimizer, sys._getframe(1))
        original_init(optimizer, *args, **kwargs)

    return [(keras.Layer, "__new__", staticmethod(new)), (BaseOptimizer, "__init__", init)]


def _record(obj, frame: FrameType) -> None:
    if obj in _recorded:  # a model's __new__ chain reaches Layer.__new__ once; keep it
        return
    line = statement_line(user_frame(frame))
    if line is not None:
        _recorded[obj] = line


def op_site(layer_path: str | None) -> tuple[SourceLine | None, str]:
    """The line to report for the op being run now, and what that line is.

    Walks the stack out from the op: when the user's own code is reached first, the
    op is the user's (their `tf.exp`, even inside a `Lambda`), kind "op". When a
    library layer's `__call__` is reached first, Keras's own code ran the op; the line
    is the creation line of the innermost such layer that has one (an LSTM's cell
    shares its LSTM's), kind "layer_creation". Models are skipped: a `Sequential`'s
    line is not that of the layer inside it.

    Args:
        layer_path: the Keras layer path the op runs under (remembered, so that
            `layer_at` finds the layer afterwards).
    """
    frame = sys._getframe(1)
    _remember_running(layer_path)
    library_layers = []
    converted = None  # the user's line a converted function's frame runs
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        if frame.f_code is _LAYER_CALL:
            layer = frame.f_locals.get("self")
            if isinstance(layer, keras.Layer) and not isinstance(layer, keras.Model):
                library_layers.append(layer)
        origin = autograph_origin(frame)
        if origin is not None and is_user_file(origin[0]):
            converted = source_line(origin[0], origin[1], origin[1], None, None)
            break
        frame = frame.f_back
    for layer in library_layers:
        line = creation_line(layer)
        if line is not None:
            return line, LAYER_CREATION
    return (converted or user_line(frame)), "op"


def _remember_running(layer_path: str | None) -> None:
    if not layer_path:
        return
    stack = global_state.get_global_attribute("name_scope_stack", default=None) or []
    caller = stack[-1].caller if stack else None
    if isinstance(caller, keras.Layer) and _running.get(layer_path) is not caller:
        _running[layer_path] = caller


def recorded_layers() -> list:
    """Every layer (models included) built under `gradient-doctor run` and still alive."""
    return [obj for obj in list(_recorded.keys()) if isinstance(obj, keras.Layer)]


def layer_at(path: str | None):
    """The Keras layer whose ops run under `path` (e.g. "sequential/dense"), or None.

    Known for every layer that ran in a replayed step, and under `gradient-doctor run`
    for every layer built since.
    """
    if not path:
        return None
    layer = _running.get(path)
    if layer is not None:
        return layer
    for obj in recorded_layers():
        if getattr(obj, "path", None) == path:
            return obj
    return None


def layer_of_variable(variable):
    """The Keras layer that owns `variable` (found by its path), or None."""
    path = getattr(variable, "path", None)
    if not isinstance(path, str) or "/" not in path:
        return None
    return layer_at(path.rsplit("/", 1)[0])


def variable_path(variable) -> str:
    """The readable name of a variable: its Keras path, else its TensorFlow name."""
    path = getattr(variable, "path", None)
    if isinstance(path, str):
        return path
    name = str(getattr(variable, "name", "variable"))
    return name[:-2] if name.endswith(":0") else name


# -- finding a constructor call in the user's source ------------------------------


@dataclass(frozen=True)
class _Call:
    """One call in a user file whose callee is named like a class."""

    file: str
    node: ast.Call
    target: str | None  # the name or attribute it is assigned to, when it is


def user_calls(name: str) -> list[tuple[str, ast.Call]]:
    """Every call of a callable named `name` (`name(...)`, `a.b.name(...)`) in the user's
    files (those on the stack, then the user's loaded modules), as (file, call)."""
    stack, loaded = _source_files()
    return [(call.file, call.node) for file in stack + loaded for call in _calls_named(file, name)]


def _source_files() -> tuple[list[str], list[str]]:
    """The user's files in which an object may have been built: those on the stack
    (innermost first), and the other loaded modules of the user's."""
    files = []
    frame = sys._getframe(1)
    while frame is not None:
        files.append(frame.f_code.co_filename)
        frame = frame.f_back
    stack = list(dict.fromkeys(f for f in files if is_user_file(f) and os.path.isfile(f)))
    loaded = [f for f in _user_modules(len(sys.modules)) if f not in stack]
    return stack, loaded


@functools.lru_cache(maxsize=1)
def _user_modules(loaded: int) -> tuple[str, ...]:
    """The files of the user's loaded modules (recomputed when `loaded`, the number of
    modules, changes: scanning thousands of library modules per object would be slow)."""
    files = (getattr(module, "__file__", None) for module in list(sys.modules.values()))
    return tuple(f for f in files if f and is_user_file(f) and os.path.isfile(f))


def _search_source(obj, files: list[str]) -> SourceLine | None:
    """The one call of `obj`'s class in `files` that agrees with `obj`, or None."""
    class_name = type(obj).__name__
    calls = [call for file in files for call in _calls_named(file, class_name)]
    agreeing = [
        call for call in calls if _agrees(call.node, obj) and not _builds_another(call, obj)
    ]
    if len(agreeing) > 1:  # narrow down by the name the object is kept under
        agreeing = [call for call in agreeing if _kept_as(call.target, obj)]
    if len(agreeing) != 1:
        return None
    node = agreeing[0].node
    end = node.end_lineno or node.lineno
    return source_line(agreeing[0].file, node.lineno, end, node.col_offset, node.end_col_offset)


@functools.lru_cache(maxsize=64)
def _parsed(file: str, modified: float) -> tuple[list[tuple[ast.Call, str | None]], ...]:
    """Every call in `file` with the name it is assigned to (None when it is not).

    `modified`, the file's modification time, is part of the cache key: an edited
    file is parsed again.
    """
    try:
        tree = ast.parse(open(file, encoding="utf-8").read(), file)
    except (OSError, SyntaxError, ValueError):
        return ()
    targets: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Call):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name | ast.Attribute):
                    targets[id(node.value)] = (
                        target.id if isinstance(target, ast.Name) else target.attr
                    )
    return tuple(
        (node, targets.get(id(node))) for node in ast.walk(tree) if isinstance(node, ast.Call)
    )


def _calls_named(file: str, class_name: str) -> list[_Call]:
    try:
        modified = os.path.getmtime(file)
    except OSError:
        return []
    return [
        _Call(file, node, target)
        for node, target in _parsed(file, modified)
        if _callee_name(node.func) == class_name
    ]


def _callee_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _agrees(node: ast.Call, obj) -> bool:
    """False when a literal argument of the call differs from `obj`'s config."""
    config = _config(obj)
    if not config:
        return True
    try:
        signature = inspect.signature(type(obj).__init__)
        bound = signature.bind_partial(
            None,
            *(_literal(arg) for arg in node.args if not isinstance(arg, ast.Starred)),
            **{kw.arg: _literal(kw.value) for kw in node.keywords if kw.arg is not None},
        )
    except (TypeError, ValueError):
        return True
    return all(
        value is _UNKNOWN or name not in config or _same(value, config[name])
        for name, value in bound.arguments.items()
    )


def _builds_another(call: _Call, obj) -> bool:
    """Whether the call's callee, read in its module's namespace, is another class than
    `obj`'s (`torch.optim.SGD` next to a Keras SGD; a name the module does not hold at
    its top level, such as a function's local, counts as unknown: False)."""
    namespaces = [
        vars(module)
        for module in list(sys.modules.values())
        if getattr(module, "__file__", None) == call.file
    ]
    for namespace in namespaces:
        callee = _resolved(call.node.func, namespace)
        if callee is not _UNKNOWN:
            return not (isinstance(callee, type) and isinstance(obj, callee))
    return False


def _resolved(func: ast.expr, namespace: dict):
    """The object a dotted name (`name` or `a.b.name`) refers to, or `_UNKNOWN`."""
    if isinstance(func, ast.Name):
        return namespace.get(func.id, _UNKNOWN)
    if isinstance(func, ast.Attribute):
        owner = _resolved(func.value, namespace)
        if owner is _UNKNOWN:
            return _UNKNOWN
        try:
            return inspect.getattr_static(owner, func.attr)
        except AttributeError:
            return _UNKNOWN
    return _UNKNOWN


def _config(obj) -> dict:
    try:
        config = obj.get_config()
    except Exception:  # a user class whose get_config needs arguments it lacks
        return {}
    return config if isinstance(config, dict) else {}


def _literal(node: ast.expr):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _UNKNOWN


def _same(written, configured) -> bool:
    """Whether a literal argument and the config's value agree (floats to float32)."""
    if isinstance(written, bool) or isinstance(configured, bool):
        return written == configured
    if isinstance(written, int | float) and isinstance(configured, int | float):
        return math.isclose(written, configured, rel_tol=1e-6, abs_tol=1e-12)
    if isinstance(written, list | tuple) and isinstance(configured, list | tuple):
        return len(written) == len(configured) and all(
            _same(a, b) for a, b in zip(written, configured, strict=True)
        )
    if isinstance(written, str | int | float | type(None)) and isinstance(
        configured, str | int | float | type(None)
    ):
        return written == configured
    return True  # an initializer or activation spelt as a string is configured as a dict


def _kept_as(target: str | None, obj) -> bool:
    """Whether `obj` is what `target` names in a frame on the stack (its local or
    global variable, or an attribute of the frame's `self`)."""
    if target is None:
        return False
    frame = sys._getframe(1)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            names = frame.f_locals
            if names.get(target) is obj or frame.f_globals.get(target) is obj:
                return True
            owner = names.get("self")
            if owner is not None and getattr(owner, target, None) is obj:
                return True
        frame = frame.f_back
    return False
