"""The `fit` line's patch leaving out the rows of its NumPy data that hold NaN or Inf."""

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.knowledge.rewrites.finite_rows import FitRows, drop_nonfinite_rows
from gradient_doctor.core.patches import apply_edits

SCRIPT = """import numpy as onp

model.fit(x, y, sample_weight=w, epochs=2)


def train(data):
    for epoch in range(3):
        hist = model.fit(
            data.features,
            data.labels[:, None],
            batch_size=64,
        )
with scope: model.fit(x, y)
model.fit(x * 2.0, y)
"""


def _site(marker: str, script: str = SCRIPT, parts=("x", "y", "sample_weight"), ranks=(1, 1, 1)):
    """The site of the `fit` call starting on the line holding `marker`, as the adapter
    records it (its first and last lines)."""
    lines = script.splitlines()
    line = next(number for number, text in enumerate(lines, 1) if marker in text)
    end = next(n for n in range(line, len(lines) + 1) if lines[n - 1].rstrip().endswith(")"))
    source = SourceLine("train.py", line, lines[line - 1].strip(), end_line=end)
    return FitRows(source, parts, ranks, ("y",), 3, 90)


def _patched(edit, script: str = SCRIPT) -> str:
    return "".join(apply_edits(script.splitlines(keepends=True), [edit]))


def test_every_array_is_indexed_by_one_mask_of_finite_rows_in_the_files_numpy_name():
    edit = drop_nonfinite_rows(_site("sample_weight=w"), SCRIPT.splitlines())
    assert (
        "finite_rows = onp.isfinite(x) & onp.isfinite(y) & onp.isfinite(w)\n"
        "model.fit(x[finite_rows], y[finite_rows], sample_weight=w[finite_rows], epochs=2)\n"
    ) in _patched(edit)


def test_a_call_over_several_lines_in_a_loop_gets_its_mask_at_its_own_indentation():
    site = _site("hist = model.fit(", parts=("x", "y"), ranks=(3, 2))
    patched = _patched(drop_nonfinite_rows(site, SCRIPT.splitlines()))
    assert (
        "    for epoch in range(3):\n"
        "        finite_rows = (\n"
        "            onp.isfinite(data.features).reshape(len(data.features), -1).all(axis=1)\n"
        "            & onp.isfinite(data.labels[:, None])"
        ".reshape(len(data.labels[:, None]), -1).all(axis=1)\n"
        "        )\n"
        "        hist = model.fit(\n"
        "            data.features[finite_rows],\n"
        "            data.labels[:, None][finite_rows],\n"
        "            batch_size=64,\n"
        "        )\n"
    ) in patched
    compile(patched, "train.py", "exec")


def test_no_patch_where_the_mask_cannot_go_or_cannot_be_computed_once():
    lines = SCRIPT.splitlines()
    # The body of a one-line `with`: no line of its own to put the mask before.
    assert drop_nonfinite_rows(_site("with scope", parts=("x", "y")), lines) is None
    # An expression that computes anew each time it is read.
    assert drop_nonfinite_rows(_site("x * 2.0", parts=("x", "y")), lines) is None
    # No NumPy import to spell the mask with; the mask's name already taken.
    without_numpy = SCRIPT.replace("import numpy as onp", "import math")
    assert (
        drop_nonfinite_rows(_site("sample_weight=w", without_numpy), without_numpy.splitlines())
        is None
    )
    taken = SCRIPT + "finite_rows = None\n"
    assert drop_nonfinite_rows(_site("sample_weight=w", taken), taken.splitlines()) is None
