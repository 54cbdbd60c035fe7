"""Run the user's functions from a patched copy of their file while a fix is trialed.

A fix trial must run what the patch says, not an imitation of it. The patched file
is written to a scratch folder and compiled there; every live function of the
user's whose body an edit touches gets the patched code object (same closure and
globals, so the rest of the program is unchanged), and gets its own back at the
end. Nothing here depends on a framework: an adapter holds the block open while it
runs (or traces) the step, and watches whether the patched code was reached.
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from gradient_doctor.core.findings import Edit
from gradient_doctor.core.patches import patched_text


class NotPatchable(Exception):
    """The edits touch no function that can run again (module-level code, say)."""


@dataclass
class PatchedSource:
    """What a `patched_functions` block put in place.

    Attributes:
        functions: the qualified names of the functions that run patched code.
        scratch_files: the patched copies, by the original file's path.
        codes: the patched code objects the live functions run.
        met: set once the patched code ran (the patch was reached), by whichever
            watch the adapter holds open (`reached_in_python`, or its own).
    """

    functions: list[str] = field(default_factory=list)
    scratch_files: dict[str, str] = field(default_factory=dict)
    codes: list[types.CodeType] = field(default_factory=list)
    met: bool = False


@contextmanager
def patched_functions(edits: Sequence[Edit], root: str = ".") -> Iterator[PatchedSource]:
    """While the block runs, the functions that `edits` touch run the patched source.

    Raises:
        NotPatchable: when no live function covers an edited line (the line is
            module-level code that ran once), or a function's patched version has
            another set of free variables.
        PatchError: when an edit does not fit its file.
    """
    scratch = tempfile.mkdtemp(prefix="gradient-doctor-trial-")
    placed = PatchedSource()
    swapped: list[tuple[types.FunctionType, types.CodeType]] = []
    try:
        for file in sorted({edit.file for edit in edits}):
            file_edits = [e for e in edits if e.file == file]
            original = os.path.realpath(os.path.join(root, file))
            copy = os.path.join(scratch, f"{len(placed.scratch_files)}_{os.path.basename(file)}")
            text = patched_text(original, file_edits)
            with open(copy, "w", encoding="utf-8") as handle:
                handle.write(text)
            placed.scratch_files[original] = copy
            module = compile(text, copy, "exec", dont_inherit=True)
            for function, new_code in _replacements(original, module, file_edits):
                swapped.append((function, function.__code__))
                function.__code__ = new_code
                placed.functions.append(new_code.co_qualname)
                placed.codes.append(new_code)
        if not swapped:
            raise NotPatchable(
                "the patched line is not inside a function that runs again (it ran once, "
                "at module level); `gradient-doctor fix` reruns the patched script instead"
            )
        yield placed
    finally:
        for function, code in reversed(swapped):
            function.__code__ = code
        shutil.rmtree(scratch, ignore_errors=True)


def _replacements(
    original: str, module: types.CodeType, edits: Sequence[Edit]
) -> list[tuple[types.FunctionType, types.CodeType]]:
    """(live function, patched code) for each function of `original` an edit touches."""
    lines = {line for edit in edits for line in range(edit.line, max(edit.end_line, edit.line) + 1)}
    patched = list(_code_objects(module))
    found = []
    for function in _live_functions(original):
        code = function.__code__
        if code.co_name == "<module>":  # the module's own code, run once: not a function
            continue
        first, last = code.co_firstlineno, _last_line(code)
        if not any(first <= line <= last for line in lines):
            continue
        new_code = _counterpart(code, patched, edits)
        if new_code is None or len(new_code.co_freevars) != len(code.co_freevars):
            raise NotPatchable(
                f"`{code.co_qualname}` could not be matched in the patched file "
                "(its free variables changed)"
            )
        found.append((function, new_code))
    return found


def _live_functions(path: str) -> list[types.FunctionType]:
    """Every function object of the process whose code comes from `path`."""
    resolved: dict[str, bool] = {}  # each file name is resolved once

    def from_path(filename: str) -> bool:
        if filename not in resolved:
            resolved[filename] = os.path.realpath(filename) == path
        return resolved[filename]

    return [
        obj
        for obj in gc.get_objects()
        if type(obj) is types.FunctionType and from_path(obj.__code__.co_filename)
    ]


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    """The code objects nested in `code` (functions, methods, lambdas), depth first."""
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield constant
            yield from _code_objects(constant)


def _last_line(code: types.CodeType) -> int:
    """The last line of `code`'s body, nested functions included."""
    last = max((line for *_, line in code.co_lines() if line is not None), default=0)
    for nested in _code_objects(code):
        last = max(last, _last_line(nested))
    return max(last, code.co_firstlineno)


def _counterpart(
    code: types.CodeType, patched: list[types.CodeType], edits: Sequence[Edit]
) -> types.CodeType | None:
    """The patched file's code object for `code`: same qualified name, where its first
    line moved to once the edits above it added or removed lines."""
    shift = sum(
        len(edit.new_lines) - (edit.end_line - edit.line + 1)
        for edit in edits
        if edit.end_line < code.co_firstlineno
    )
    qualname = getattr(code, "co_qualname", code.co_name)
    for candidate in patched:
        same = getattr(candidate, "co_qualname", candidate.co_name) == qualname
        if same and candidate.co_firstlineno == code.co_firstlineno + shift:
            return candidate
    return None


@contextmanager
def reached_in_python(placed: PatchedSource) -> Iterator[None]:
    """Set `placed.met` when a patched function is called while the block runs.

    For steps that run the user's Python code as it is (eager PyTorch, NumPy); a
    framework that converts the code first (AutoGraph) watches its own way. Uses the
    interpreter's profile hook, chained to any already set, so hold it open for one
    step only.
    """
    codes = frozenset(placed.codes)
    previous = sys.getprofile()
    chained = previous if callable(previous) else None  # cProfile's hook is no function

    def profile(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            placed.met = True
        if chained is not None:
            chained(frame, event, arg)

    sys.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(previous)
