"""The core's patched copy of a user's file: live functions run the patched code as written,
the watch says whether it ran, and every function gets its own code back."""

import pytest

from gradient_doctor.core.findings import Edit
from gradient_doctor.core.patched_source import (
    NotPatchable,
    patched_functions,
    reached_in_python,
)
from gradient_doctor.core.source_frames import display_path

THIS_FILE = display_path(__file__)


def _halved(x):
    return x / 2.0  # the line the patch rewrites


def _caller(x):
    return _halved(x) + 1.0


def _never_called(x):
    return x * 2.0  # a line no trial reaches


def _edit(marker: str, old: str, new: str) -> Edit:
    lines = open(__file__).read().splitlines()
    number = next(n for n, line in enumerate(lines, 1) if marker in line and "_edit(" not in line)
    code = lines[number - 1]
    return Edit(THIS_FILE, number, number, (code.replace(old, new),), (code,))


def test_a_called_function_runs_the_patch_and_the_watch_sees_it():
    original = _halved.__code__
    with patched_functions([_edit("the patch rewrites", "/ 2.0", "/ 4.0")]) as placed:
        with reached_in_python(placed):
            value = _caller(8.0)  # the caller is unchanged; the function it calls is not
    assert value == 3.0 and placed.met and placed.functions == ["_halved"]
    assert _halved.__code__ is original and _caller(8.0) == 5.0


def test_a_patched_function_that_does_not_run_is_not_reached():
    with patched_functions([_edit("no trial reaches", "* 2.0", "* 3.0")]) as placed:
        with reached_in_python(placed):
            _caller(1.0)
    assert not placed.met and _never_called(1.0) == 2.0


def test_module_level_code_cannot_run_again():
    edit = _edit("THIS_FILE = display_path", "display_path", "str")
    with pytest.raises(NotPatchable, match="module level"):
        with patched_functions([edit]):
            pass
