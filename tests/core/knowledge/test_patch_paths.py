"""A fix's patch names its file relative to the folder run from, or it has no patch."""

import dataclasses

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.fix_placement import place_fixes
from gradient_doctor.core.knowledge import diagnose

SCRIPT = "import tensorflow as tf\n\n\ndef step(scores):\n    w = tf.exp(scores)\n    return w\n"


def _finding(make_evidence, file):
    evidence = make_evidence(code="w = tf.exp(scores)")
    origin = dataclasses.replace(evidence.origin, source=SourceLine(file, 5, "w = tf.exp(scores)"))
    evidence = dataclasses.replace(evidence, origin=origin)
    return diagnose(evidence).finding(evidence)


def test_a_file_inside_the_folder_run_from_gets_a_relative_patch(tmp_path, make_evidence):
    (tmp_path / "train.py").write_text(SCRIPT)
    placed = place_fixes(_finding(make_evidence, "train.py"), root=str(tmp_path))
    patches = [fix.patch for fix in placed.fixes if fix.patch]
    assert patches, [fix.family for fix in placed.fixes]
    assert all(patch.startswith("--- a/train.py\n+++ b/train.py\n") for patch in patches)


def test_a_file_outside_the_folder_run_from_gets_no_patch(tmp_path, make_evidence):
    run_from, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    run_from.mkdir()
    elsewhere.mkdir()
    (elsewhere / "train.py").write_text(SCRIPT)
    for file in (str(elsewhere / "train.py"), "../elsewhere/train.py"):
        placed = place_fixes(_finding(make_evidence, file), root=str(run_from))
        # `patch -p1` and `git apply` refuse absolute paths and `..`: no patch at all.
        assert [fix.patch for fix in placed.fixes] == [None] * len(placed.fixes)
        assert placed.fixes  # the fixes themselves stay, to read
