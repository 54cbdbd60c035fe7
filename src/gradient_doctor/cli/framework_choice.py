"""Which framework's adapter watches `gradient-doctor run`: read from the script's imports.

The script is read, never imported (importing it would run it): its `import`
statements (and imports by a constant name, `importlib.import_module("torch")`), and
those of the modules of the user's own folder it imports, are found with `ast`. A
script that imports `torch` and neither `tensorflow` nor `keras` is a PyTorch script; so
is one that imports both but trains only as PyTorch does (it calls `.backward()` or
`.zero_grad()` and none of TensorFlow's training calls: a `GradientTape`, `fit`,
`apply_gradients`, `train_on_batch`); anything else keeps the TensorFlow adapter (the
doctor's first one). Each adapter is
built here, its framework imported only then, so a PyTorch run never loads TensorFlow.
"""

from __future__ import annotations

import ast
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradient_doctor.cli.script_runner import ScriptEnd

TENSORFLOW, TORCH = "tensorflow", "torch"
# Top-level modules that make a script TensorFlow's, and PyTorch's.
_TENSORFLOW_MODULES = frozenset({"tensorflow", "keras", "tf_keras"})
_TORCH_MODULES = frozenset({"torch"})
# The user's own modules read per script, at most (a big project is not walked whole).
_MAX_MODULES = 200


def script_framework(script: str) -> str:
    """`TORCH` when the script, or a module of its folder that it imports, imports torch and
    nothing does import TensorFlow or Keras, or when it runs Keras on its torch backend
    (`keras_backend`); `TENSORFLOW` otherwise.

    Args:
        script: path of the training script.
    """
    imported = _imports_of(script)
    if "keras" in imported and keras_backend(script) == TORCH:
        return TORCH  # Keras's ops run as torch's; loading TensorFlow first would pin it
    if not imported & _TORCH_MODULES:
        return TENSORFLOW
    if imported & _TENSORFLOW_MODULES:
        called = _training_calls(script)
        trains_torch, trains_tf = called & _TORCH_TRAINING, called & _TENSORFLOW_TRAINING
        return TORCH if trains_torch and not trains_tf else TENSORFLOW
    return TORCH


# The calls that train a model, by framework: a script importing both trains with the one
# whose calls it makes (TensorFlow used for a `tf.data` pipeline or a summary writer).
_TORCH_TRAINING = frozenset({"backward", "zero_grad"})
_TENSORFLOW_TRAINING = frozenset(
    {"GradientTape", "fit", "apply_gradients", "train_on_batch", "minimize", "fit_generator"}
)


def _training_calls(script: str) -> set[str]:
    """The names of the training calls (`_TORCH_TRAINING`, `_TENSORFLOW_TRAINING`) the script
    and its folder's modules make, as attribute or plain calls."""
    wanted = _TORCH_TRAINING | _TENSORFLOW_TRAINING
    called = set()
    for path in _modules_of(script):
        try:
            with open(path, encoding="utf-8") as handle:
                tree = ast.parse(handle.read(), filename=path)
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if name in wanted:
                    called.add(name)
    return called


def uses_keras(script: str) -> bool:
    """True when the script, or a module of its folder that it imports, imports Keras."""
    return "keras" in _imports_of(script)


def keras_backend(script: str) -> str:
    """The Keras backend the script runs on: the one it sets itself
    (`os.environ["KERAS_BACKEND"] = "torch"`, or `setdefault`, before `import keras`),
    else `$KERAS_BACKEND`, else "tensorflow" (Keras's default). Read, never run."""
    told = _backend_set_in(script)
    if told is not None:
        return told
    return os.environ.get("KERAS_BACKEND", TENSORFLOW) or TENSORFLOW


def _backend_set_in(script: str) -> str | None:
    """The string constant the script assigns to `KERAS_BACKEND` in `os.environ`, or None."""
    try:
        with open(script, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=script)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and _names_backend(target.slice):
                    return str(node.value.value)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("setdefault", "putenv")
            and len(node.args) == 2
            and _names_backend(node.args[0])
            and isinstance(node.args[1], ast.Constant)
        ):
            return str(node.args[1].value)
    return None


def _names_backend(node: ast.AST) -> bool:
    """True for the string constant "KERAS_BACKEND"."""
    return isinstance(node, ast.Constant) and node.value == "KERAS_BACKEND"


def _imports_of(script: str) -> set[str]:
    """The top-level names of every module the script and its folder's modules import."""
    return _walked(script)[0]


def _modules_of(script: str) -> set[str]:
    """The script's path and those of its folder's modules it imports, read by `_walked`."""
    return _walked(script)[1]


def _walked(script: str) -> tuple[set[str], set[str]]:
    """The top-level names the script and its folder's modules import, and their paths."""
    folder = os.path.dirname(os.path.abspath(script))
    pending, seen, names = [os.path.abspath(script)], set(), set()
    while pending and len(seen) < _MAX_MODULES:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for module, level in _imported_modules(path):
            base = folder if level == 0 else _parent(path, level)
            local = _local_module(base, module)
            if local is not None:
                pending.append(local)
            elif level == 0 and module:
                names.add(module.partition(".")[0])
            if module == "gradient_doctor.torch" or module.startswith("gradient_doctor.torch."):
                names.add("torch")
    return names, seen


def _imported_modules(path: str) -> list[tuple[str, int]]:
    """(module, relative level) of each import in the file; none when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return []
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, 0) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            found.append((module, node.level))
            # `from package import module` may name a module of the user's folder.
            found.extend(
                (f"{module}.{alias.name}" if module else alias.name, node.level)
                for alias in node.names
                if alias.name != "*"
            )
        elif (named := _imported_by_call(node)) is not None:
            found.append((named, 0))
    return found


def _imported_by_call(node: ast.AST) -> str | None:
    """The module a call imports by a constant name (`importlib.import_module("torch")`,
    `__import__("torch")`), else None; a relative name (".models") is not read."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    first = node.args[0]
    if name not in ("import_module", "__import__") or not isinstance(first, ast.Constant):
        return None
    module = first.value
    return module if isinstance(module, str) and module and not module.startswith(".") else None


def _parent(path: str, level: int) -> str:
    """The folder a relative import of `level` dots in `path` starts from."""
    folder = os.path.dirname(path)
    for _ in range(level - 1):
        folder = os.path.dirname(folder)
    return folder


def _local_module(base: str, module: str) -> str | None:
    """The file of `module` under `base` (`a/b.py` or `a/b/__init__.py`), or None."""
    if not module:
        return None
    stem = os.path.join(base, *module.split("."))
    for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    return None


@dataclass(frozen=True)
class RunAdapter:
    """What `watched_run` drives, whatever the framework.

    Attributes:
        watcher: has `install()`, `uninstall()`, `finish()` and `report(script, error)`.
        protected: the functions a signal must not interrupt (a step's diagnosis).
        crash_dump: the `--dump` writer, with `finish()`, or None.
        at_end: called when the script ended its own way, while what it held is alive
            (`run_script`'s `at_end`, given a `ScriptEnd`), or None.
    """

    watcher: object
    protected: tuple[Callable, ...]
    crash_dump: object | None = None
    at_end: Callable[[ScriptEnd], None] | None = None


def run_adapter(
    framework: str,
    script: str,
    args: list[str],
    *,
    stop_on_problem: bool,
    trial_steps: int,
    layer_stats: bool,
    on_record: Callable | None,
    max_steps: int | None,
    dump_dir: str | None,
    sample_every: int | None = None,
    pending: str | None = None,
) -> RunAdapter:
    """The adapter that watches `script` for `framework` (`script_framework`);
    `sample_every` fixes PyTorch's sampling period of the per-module statistics;
    `pending` is said under the fixes of each finding printed live (what is still to
    judge them after the run)."""
    if framework == TORCH:
        from gradient_doctor.core.pipeline import Session
        from gradient_doctor.render.terminal import render_finding, render_warning
        from gradient_doctor.torch_adapter.script_adapter import ScriptAdapter

        watcher = ScriptAdapter(
            script,
            args,
            stop_on_problem=stop_on_problem,
            on_finding=functools.partial(render_finding, pending=pending),
            on_warning=render_warning,
            trial_steps=trial_steps,
            on_record=on_record,
            max_steps=max_steps,
            dump_dir=dump_dir,
            sample_every=sample_every,
        )
        protected = (
            Session.after_step,
            Session.record,
            ScriptAdapter.finish,
            ScriptAdapter.script_ended,
        )
        return RunAdapter(watcher, protected, watcher.crash_dump, watcher.script_ended)
    from gradient_doctor.core.pipeline import Session, announce_trials
    from gradient_doctor.tf_adapter.dump.crash_dump import CrashDump
    from gradient_doctor.tf_adapter.watcher import Watcher, make_watcher

    crash_dump = CrashDump(dump_dir, script) if dump_dir else None
    from gradient_doctor.render.terminal import render_finding

    watcher = make_watcher(
        on_finding=functools.partial(render_finding, pending=pending),
        stop_on_problem=stop_on_problem,
        trial_steps=trial_steps,
        layer_stats=layer_stats,
        on_record=on_record,
        on_problem=crash_dump,
        max_steps=max_steps,
    )
    watcher.session.on_trials = functools.partial(announce_trials, knob="--trial-steps N")
    protected = (
        Watcher.after_step,
        Watcher.on_missing_gradients,
        Session.record,
        Watcher.finish,
        Watcher.script_ended,
    )
    return RunAdapter(watcher, protected, crash_dump, watcher.script_ended)
