"""Edits become unified diffs that patch -p1 takes, and the diff applier reads them back."""

import subprocess

import pytest

from gradient_doctor.core.findings import Edit, SourceLine
from gradient_doctor.core.patches import (
    PatchError,
    apply_edits,
    apply_unified_diff,
    replace_line,
    unified_diff,
)

TEXT = "import tensorflow as tf\n\n\ndef step(x):\n    w = tf.exp(x)\n    return w\n"


def _edit():
    lines = TEXT.splitlines(keepends=True)
    return replace_line(
        SourceLine("pkg/train.py", 5, "w = tf.exp(x)"), ("w = tf.exp(x - 1)",), lines
    )


def test_a_rewrite_keeps_the_line_indentation_and_the_diff_applies_with_patch(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text(TEXT)
    edit = _edit()
    assert edit.new_lines == ("    w = tf.exp(x - 1)",)
    diff = unified_diff([edit], str(tmp_path))
    assert diff.startswith("--- a/pkg/train.py\n+++ b/pkg/train.py\n")
    assert apply_unified_diff(diff, str(tmp_path))["pkg/train.py"] == TEXT.replace(
        "tf.exp(x)", "tf.exp(x - 1)"
    )
    subprocess.run(["patch", "-p1"], input=diff, text=True, cwd=tmp_path, check=True)
    assert "w = tf.exp(x - 1)" in (tmp_path / "pkg" / "train.py").read_text()


def test_a_last_line_without_newline_is_marked_and_kept_so(tmp_path):
    (tmp_path / "t.py").write_text("x = 1\ny = tf.exp(x)")
    lines = (tmp_path / "t.py").read_text().splitlines(keepends=True)
    edit = replace_line(SourceLine("t.py", 2, "y = tf.exp(x)"), ("y = tf.exp(x - 1)",), lines)
    diff = unified_diff([edit], str(tmp_path))
    assert "\\ No newline at end of file" in diff
    subprocess.run(["patch", "-p1"], input=diff, text=True, cwd=tmp_path, check=True)
    assert (tmp_path / "t.py").read_text() == "x = 1\ny = tf.exp(x - 1)"


def test_an_edit_of_a_line_that_changed_since_is_refused():
    stale = Edit("train.py", 5, 5, ("    w = 1",), ("    w = tf.exp(y)",))
    with pytest.raises(PatchError, match="no longer what the run read"):
        apply_edits(TEXT.splitlines(keepends=True), [stale])
    assert replace_line(SourceLine("f.py", 5, "other = code"), ("x",), TEXT.splitlines()) is None
