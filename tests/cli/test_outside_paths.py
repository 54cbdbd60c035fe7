"""A rerun's arguments that lead out of the folder: read as the run read them, and any file
there that the rerun writes put back (a checkpoint path given absolute, overwritten by a
patched copy's `torch.save`, which no audit hook sees)."""

import os

from gradient_doctor.cli.outside_paths import OutsidePaths
from gradient_doctor.cli.patched_rerun import rerun_patched


def _layout(tmp_path):
    folder = tmp_path / "project"
    (folder / "data").mkdir(parents=True)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "ck.pt").write_bytes(b"PRECIOUS CHECKPOINT")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    return folder, shared, scratch


def test_paths_leading_out_are_made_absolute_and_what_the_rerun_wrote_is_undone(tmp_path):
    folder, shared, scratch = _layout(tmp_path)
    args = ["--ckpt=../shared/ck.pt", "--new", "../shared/new.pt", "--data", "data/x.npy", "5"]
    outside = OutsidePaths(args, str(folder), str(scratch))
    assert outside.rerun_args == [
        f"--ckpt={shared / 'ck.pt'}",
        "--new",
        str(shared / "new.pt"),
        "--data",
        "data/x.npy",  # inside the folder: the copy has it
        "5",
    ]
    with outside:
        (shared / "ck.pt").write_bytes(b"a patched copy's weights, longer than before")
        (shared / "new.pt").write_bytes(b"made by the rerun")
    assert (shared / "ck.pt").read_bytes() == b"PRECIOUS CHECKPOINT"
    assert not (shared / "new.pt").exists()
    assert outside.notes == [
        f"it wrote {shared / 'ck.pt'}, outside your folder: put back as it was",
        f"it created {shared / 'new.pt'}, outside your folder: removed",
    ]


def test_a_patched_copy_writing_an_absolute_path_leaves_the_users_file_as_it_was(
    tmp_path, monkeypatch
):
    folder, shared, _ = _layout(tmp_path)
    (folder / "train.py").write_text(
        "import sys\n"
        "with open(sys.argv[1], 'wb') as handle:\n"
        "    handle.write(b'overwritten by a rerun')\n"
    )
    monkeypatch.chdir(folder)
    target = str(shared / "ck.pt")
    rerun = rerun_patched("train.py", [target], None, failed_at=0, steps_past=5, timeout=120)
    assert (shared / "ck.pt").read_bytes() == b"PRECIOUS CHECKPOINT"
    assert f"it wrote {os.path.realpath(target)}, outside your folder: put back as it was" in (
        rerun.why
    )
