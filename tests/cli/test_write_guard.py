"""The write guard of a rerun: in a scratch copy of a folder, a large file is a link to the
user's own, so writing it (NumPy's `np.save`, a plain `open(..., "wb")`) truncates the user's
file; under the guard each such write is refused with the reason, noted in its log, and the
user's file stays byte for byte as it was, while the copy's own files are written freely.

Each guarded script runs in a child interpreter: an audit hook stays for a process's life.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gradient_doctor.cli.scratch_copy import LINK_ABOVE_BYTES, copy_folder
from gradient_doctor.cli.write_guard import WriteGuard

# The guarded child: the guard installed first, then the script, as a rerun runs it.
_CHILD = """
import sys
from gradient_doctor.cli import write_guard
write_guard.install(write_guard.WriteGuard.load(sys.argv[1]))
exec(compile(open(sys.argv[2]).read(), sys.argv[2], "exec"))
"""


def _big(path: Path) -> str:
    """Write a file just over the link size (sparse, but for a header); its digest."""
    with open(path, "wb") as handle:
        handle.write(b"the user's data\n")
        handle.truncate(LINK_ABOVE_BYTES + 1)
    return _digest(path)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def folder(tmp_path):
    """A user's folder holding a large array file, its copy and that copy's guard."""
    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("small\n")
    digest = _big(user / "features.npy")
    copy = copy_folder(str(user), str(tmp_path / "copy"))
    guard = copy.guard(str(tmp_path / "refused.log"))
    return user, copy, guard, digest


def _run_guarded(guard: WriteGuard, cwd: str, code: str, tmp_path: Path):
    saved = guard.save(str(tmp_path / "guard.json"))
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run(
        [sys.executable, "-c", _CHILD, saved, str(script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_linked_large_file_would_be_truncated_through_its_link(folder):
    user, copy, _, digest = folder
    linked = Path(copy.root) / "features.npy"
    # The hazard: the copy holds a symbolic link to the user's file, not a copy.
    assert linked.is_symlink() and os.path.realpath(linked) == str(user / "features.npy")
    assert copy.linked == {str(user / "features.npy"): (LINK_ABOVE_BYTES + 1, _mtime(linked))}
    assert not (Path(copy.root) / "notes.txt").is_symlink()
    assert _digest(user / "features.npy") == digest


def _mtime(path: Path) -> int:
    return os.stat(path).st_mtime_ns


@pytest.mark.parametrize(
    "write",
    [
        "numpy.save('features.npy', numpy.zeros(3))",
        "open('features.npy', 'r+b').write(b'x')",
        "os.truncate('features.npy', 0)",
        "os.close(os.open('features.npy', os.O_WRONLY | os.O_TRUNC))",
    ],
)
def test_a_write_through_a_link_is_refused_and_the_users_file_kept(write, folder, tmp_path):
    user, copy, guard, digest = folder
    done = _run_guarded(
        guard,
        copy.root,
        f"""
        import os, numpy
        open('notes.txt', 'a').write('the copy is written freely\\n')
        try:
            {write}
        except PermissionError as error:
            print('refused:', error)
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "a large file of your folder that the scratch copy links to" in done.stdout
    assert _digest(user / "features.npy") == digest
    assert (user / "notes.txt").read_text() == "small\n"
    assert (Path(copy.root) / "notes.txt").read_text().endswith("written freely\n")
    refused = guard.refused()
    assert refused.startswith(f"the rerun of your script tried to write {user / 'features.npy'}")
    assert copy.trespass(guard) == refused


def test_replacing_a_link_or_removing_it_leaves_the_users_file(folder, tmp_path):
    user, copy, guard, digest = folder
    done = _run_guarded(
        guard,
        copy.root,
        """
        import os
        open('features.npy.tmp', 'wb').write(b'new')
        os.replace('features.npy.tmp', 'features.npy')  # the link is replaced, not followed
        os.remove('features.npy')
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert _digest(user / "features.npy") == digest
    assert guard.refused() is None and copy.trespass(guard) is None


def test_an_absolute_path_into_the_users_folder_is_refused(folder, tmp_path):
    user, copy, guard, _ = folder
    done = _run_guarded(
        guard,
        copy.root,
        f"""
        import os
        open({str(tmp_path / "elsewhere.txt")!r}, 'w').close()  # outside the folder: free
        open({str(user / "log.txt")!r}, 'a').write('twice')
        """,
        tmp_path,
    )
    assert done.returncode == 1 and "RerunWriteRefused" in done.stderr
    assert not (user / "log.txt").exists() and (tmp_path / "elsewhere.txt").exists()
    assert "in your own folder, by a path that leads out of the scratch copy" in guard.refused()


def test_a_linked_file_changed_by_code_the_guard_cannot_see_is_said_loudly(folder):
    user, copy, guard, _ = folder
    with open(user / "features.npy", "r+b") as handle:  # as a C writer would, unguarded
        handle.write(b"changed")
    os.utime(user / "features.npy", ns=(1, 1))
    said = copy.trespass(guard)
    assert said.startswith(f"WARNING: your file {user / 'features.npy'} changed while the rerun")
    assert "C/C++" in said
