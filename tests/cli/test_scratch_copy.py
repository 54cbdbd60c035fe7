"""The scratch copy a rerun runs in: small files copied, large data linked, large checkpoints
copied (the C/C++ writers that save them go past the write guard), the user's links kept
pointing where they did (inside the folder: to the copy's own entry), and, given the folder's
listing from before the run, nothing the run made."""

from __future__ import annotations

import os
from pathlib import Path

from gradient_doctor.cli.scratch_copy import LINK_ABOVE_BYTES, copy_folder, folder_listing


def _big(path: Path) -> None:
    with open(path, "wb") as handle:
        handle.write(b"header")
        handle.truncate(LINK_ABOVE_BYTES + 1)


def test_large_checkpoints_are_copied_and_large_data_linked(tmp_path):
    user = tmp_path / "user"
    (user / "ckpt").mkdir(parents=True)
    for name in ("model.pt", "ckpt/model.ckpt.data-00000-of-00001", "weights.H5", "data.bin"):
        _big(user / name)
    copy = copy_folder(str(user), str(tmp_path / "copy"))
    root = Path(copy.root)
    copied = ["model.pt", "ckpt/model.ckpt.data-00000-of-00001", "weights.H5"]
    assert [(root / name).is_symlink() for name in copied] == [False, False, False]
    assert (root / "model.pt").read_bytes()[:6] == b"header"
    assert (root / "data.bin").is_symlink() and list(copy.linked) == [str(user / "data.bin")]


def test_the_users_links_point_to_the_copy_inside_and_are_guarded_outside(tmp_path):
    user, outside = tmp_path / "user", tmp_path / "outside"
    (user / "runs" / "3").mkdir(parents=True)
    (user / "runs" / "3" / "last.txt").write_text("3")
    outside.mkdir()
    (outside / "shared.csv").write_text("a,b\n")
    os.symlink(user / "runs" / "3", user / "latest")  # absolute, into the folder
    os.symlink(outside / "shared.csv", user / "shared.csv")
    os.symlink(outside, user / "datasets")
    copy = copy_folder(str(user), str(tmp_path / "copy"))
    root = Path(copy.root)
    assert os.path.realpath(root / "latest") == str(root / "runs" / "3")
    assert (root / "latest" / "last.txt").read_text() == "3"
    assert list(copy.linked) == [str(outside / "shared.csv")]
    assert copy.linked_folders == (str(outside),)
    guard = copy.guard(str(tmp_path / "log"))
    assert guard.refusal(str(outside / "shared.csv")).endswith("not your file)")
    assert guard.refusal(str(outside / "new.csv")) is not None  # inside a linked folder
    assert guard.refusal(str(root / "shared.csv")) is None
    assert guard.refusal(str(tmp_path / "elsewhere")) is None


def test_given_the_listing_from_before_the_run_the_copy_leaves_out_what_it_made(tmp_path):
    user = tmp_path / "user"
    (user / "data").mkdir(parents=True)
    (user / "train.py").write_text("pass\n")
    (user / ".venv").mkdir()
    (user / ".venv" / "python").write_text("")
    listing = folder_listing(str(user))
    assert listing == {"train.py", "data"}
    (user / "resume.pt").write_text("made by the run")
    (user / "data" / "cache.npy").write_text("made by the run")
    (user / "train.py").write_text("pass  # changed by the run\n")
    copy = copy_folder(str(user), str(tmp_path / "copy"), listing)
    root = Path(copy.root)
    kept = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    assert kept == ["data", "train.py"]
    assert (root / "train.py").read_text() == "pass  # changed by the run\n"


def test_paths_into_the_folder_are_mapped_to_the_copys(tmp_path):
    user = tmp_path / "user"
    (user / "src").mkdir(parents=True)
    (user / "train.py").write_text("")
    copy = copy_folder(str(user), str(tmp_path / "copy"))
    assert copy.mapped("train.py") == "train.py"  # relative: read in the copy as it is
    assert copy.mapped(str(user / "train.py")) == os.path.join(copy.root, "train.py")
    assert copy.mapped(str(user / "src")) == os.path.join(copy.root, "src")
    assert copy.mapped("") == ""
    assert copy.mapped(str(user / ".venv" / "lib")) == str(user / ".venv" / "lib")  # not copied
    assert copy.mapped("../elsewhere.py") == str(tmp_path / "elsewhere.py")


def test_a_copy_of_a_copy_keeps_its_folders_and_leaves_out_only_scratch_folders(tmp_path):
    # `fix` reruns a patched copy, whose own failing step is recorded by a rerun in a copy
    # of that copy: every folder of the first copy lies under a scratch folder, and was
    # left out (`data/`, so the script's np.load failed there).
    import tempfile

    from gradient_doctor.cli.write_guard import SCRATCH_PREFIX

    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}test-") as scratch:
        first = Path(scratch) / "copy"
        (first / "data").mkdir(parents=True)
        (first / "data" / "x.npy").write_bytes(b"rows")
        (first / "train.py").write_text("print('hi')\n")
        again = copy_folder(str(first), str(tmp_path / "again"))
        assert (Path(again.root) / "data" / "x.npy").read_bytes() == b"rows"
