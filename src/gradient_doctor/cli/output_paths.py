"""Refuse, before the run, report paths that would destroy a file the doctor did not write."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from gradient_doctor.errors import UsageError

# Overwriting one of these loses code: named as such when refused.
SOURCE_SUFFIXES = frozenset(
    {".py", ".pyw", ".pyi", ".pyx", ".pxd", ".ipynb", ".ipy", ".sh", ".c", ".cc", ".cpp", ".h"}
)
# TensorFlow's summary writers name every event file so (a rerun adds a new one).
EVENT_FILE_PREFIX = "events.out.tfevents."
# An earlier report is recognised from its first bytes (the JSON schema, the HTML marker).
_HEAD_BYTES = 4096
_WHAT = {"--report": "the JSON report", "--html": "the HTML report"}
_SUFFIX = {"--report": ".json", "--html": ".html"}


def check_outputs(
    script: str | None,
    report: str | None = None,
    html: str | None = None,
    tensorboard: str | None = None,
) -> None:
    """Raise `UsageError` when an output path cannot be written without losing something.

    A report file may replace only an earlier report of the doctor's (a JSON file of
    schema `gradient-doctor/report/v1`, or an HTML page it wrote), so a rerun into the
    same path works; never the script, a source file, or any other file. The TensorBoard
    folder may be new, empty, or hold only event files.

    Args:
        script: str or None, the script to be run (None for `replay`).
        report: str or None, the `--report` path.
        html: str or None, the `--html` path.
        tensorboard: str or None, the `--tensorboard` folder.

    Raises:
        UsageError: with what would be lost and what to pass instead.
    """
    files = [(flag, path) for flag, path in (("--report", report), ("--html", html)) if path]
    for flag, path in files:
        check_report_file(flag, path, script)
        check_writable_place(flag, path)
    if len(files) == 2 and _same_path(report, html):
        other = _suggestion("--html", html, script)
        raise UsageError(
            f"`--report` and `--html` name the same file, {report!r}: one report would replace "
            f"the other. Pass two paths, for example `--html {other}`."
        )
    if tensorboard:
        check_tensorboard_folder(tensorboard)
        check_writable_place("--tensorboard", tensorboard, folder=True)


def check_writable_place(flag: str, path: str, folder: bool = False) -> None:
    """Raise `UsageError` when `path` (a file, or with `folder` a folder) could not be
    written at the end of the run: the nearest folder that exists above it (or, for a
    folder, the folder itself) is a file, or nothing can be written in it (found before a
    run of hours, not after it)."""
    above = os.path.abspath(path) if folder else os.path.dirname(os.path.abspath(path))
    while not os.path.exists(above):
        parent = os.path.dirname(above)
        if parent == above:
            break
        above = parent
    example = f"for example `{flag} {os.path.join('gradient_doctor', os.path.basename(path))}`"
    if not os.path.isdir(above):
        raise UsageError(
            f"cannot write `{flag}` to {path!r}: {above!r} is a file, not a folder. Pass a "
            f"path in a folder, {example}."
        )
    try:  # a folder made and removed at once: what `os.access` says of root is no proof
        os.rmdir(tempfile.mkdtemp(prefix=".gradient-doctor-probe-", dir=above))
    except OSError as error:
        raise UsageError(
            f"cannot write `{flag}` to {path!r}: nothing can be written in {above!r} "
            f"({error.strerror or error}). Pass a path in a folder you can write to, {example}."
        ) from None


def check_report_file(flag: str, path: str, script: str | None) -> None:
    """Raise `UsageError` unless `path` is new or holds an earlier report of the doctor's.

    Args:
        flag: str, "--report" or "--html".
        path: str, the path given to `flag`.
        script: str or None, the script to be run.
    """
    what = _WHAT[flag]
    target = Path(path)
    if target.is_dir():
        inside = os.path.join(path, "report" + _SUFFIX[flag])
        raise UsageError(
            f"`{flag}` must name a file, but {path!r} is a folder. "
            f"Pass a file path, for example `{flag} {inside}`."
        )
    if not target.exists():
        return
    instead = f"Pass another path, for example `{flag} {_suggestion(flag, path, script)}`."
    if script is not None and _same_path(path, script):
        lost = "it is the script being run, and its code would be lost"
    elif target.suffix.lower() in SOURCE_SUFFIXES:
        lost = "it is a source file, and its code would be lost"
    elif is_doctor_report(target):
        return
    else:
        lost = (
            "the file exists and is not a report gradient-doctor wrote, so its contents would "
            "be lost (the doctor overwrites only its own earlier reports)"
        )
    raise UsageError(f"cannot write {what} to {path!r}: {lost}. {instead}")


def check_tensorboard_folder(path: str) -> None:
    """Raise `UsageError` unless `path` is a new or empty folder, or holds only event files."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise UsageError(
            f"`--tensorboard` must name a folder, but {path!r} is a file. "
            "Pass a folder for the event files, for example `--tensorboard logs/doctor`."
        )
    other = first_non_event_file(target) if target.is_dir() else None
    if other is not None:
        raise UsageError(
            f"cannot write TensorBoard summaries to {path!r}: the folder holds files that are "
            f"not TensorBoard event files (such as {str(other)!r}), and the doctor does not mix "
            "its output with them. Pass a new or empty folder, or one that holds only event "
            f"files, for example `--tensorboard {os.path.join(path, 'gradient_doctor')}`."
        )


def is_doctor_report(path: Path) -> bool:
    """True for an earlier JSON report (schema `gradient-doctor/report/v1`) or HTML page of
    the doctor's, which a rerun may replace."""
    from gradient_doctor.core.report import SCHEMA
    from gradient_doctor.render.html_report import GENERATOR_META

    try:
        with open(path, "rb") as file:
            head = file.read(_HEAD_BYTES)
        if GENERATOR_META.encode() in head:
            return True
        if not head.lstrip().startswith(b"{"):
            return False
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # unreadable, not UTF-8, or not JSON: not a report
        return False
    return isinstance(data, dict) and data.get("schema") == SCHEMA


def first_non_event_file(folder: Path) -> Path | None:
    """The first file under `folder` that is not a TensorBoard event file, or None."""
    for root, _, names in os.walk(folder):
        for name in sorted(names):
            if not name.startswith(EVENT_FILE_PREFIX):
                return Path(root, name)
    return None


def _same_path(first: str, second: str) -> bool:
    """Whether two paths name one file (through links, or spelled differently)."""
    try:
        return os.path.samefile(first, second)
    except OSError:  # one of them does not exist yet
        return os.path.realpath(first) == os.path.realpath(second)


def _suggestion(flag: str, path: str, script: str | None = None) -> str:
    """A path beside `path` that `flag` could write: new, or an earlier report."""
    stem = Path(script).stem if script else Path(path).stem
    folder = os.path.dirname(path)
    for number in range(1, 100):
        tail = "" if number == 1 else f"_{number}"
        candidate = os.path.join(folder, f"{stem}_report{tail}{_SUFFIX[flag]}")
        if not os.path.exists(candidate):
            return candidate
    return os.path.join(folder, f"gradient_doctor_report{_SUFFIX[flag]}")
