"""The learning rate of a script's own update, lowered where the script writes it."""

import pytest

from gradient_doctor.core.knowledge.rewrites.own_update import lower_own_rate
from gradient_doctor.core.patches import apply_edits


def _lowered(source: str) -> tuple[list[str], float] | None:
    lines = source.splitlines(keepends=True)
    made = lower_own_rate(lines, "train.py", 0.1)
    if made is None:
        return None
    edits, was = made
    return [line.rstrip("\n") for line in apply_edits(lines, list(edits))], was


@pytest.mark.parametrize(
    "update",
    [
        "w -= learning_rate * w.grad",
        "w -= w.grad * learning_rate",
        "w.data -= learning_rate * w.grad.data",
        "w.sub_(learning_rate * w.grad)",
        "w.add_(w.grad, alpha=-learning_rate)",
        "w.data.sub_(w.grad, alpha=learning_rate)",
    ],
)
def test_the_one_assignment_of_the_rate_name_is_scaled(update):
    source = f"learning_rate = 1e-2\nfor t in range(9):\n    {update}\n"
    patched, was = _lowered(source)
    assert was == 0.01 and patched[0] == "learning_rate = 0.001"
    assert patched[2].strip() == update  # the update itself as written


def test_literal_rates_on_the_update_lines_are_each_scaled():
    source = "with torch.no_grad():\n    a -= 0.5 * a.grad\n    b -= 0.5 * b.grad  # bias\n"
    patched, was = _lowered(source)
    assert was == 0.5
    assert patched[1:] == ["    a -= 0.05 * a.grad", "    b -= 0.05 * b.grad  # bias"]


@pytest.mark.parametrize(
    "source",
    [
        "lr = 0.1\nlr = 0.2\nw -= lr * w.grad\n",  # assigned twice: which one is in use?
        "w -= args.lr * w.grad\n",  # not a number written in this file
        "lr, momentum = 0.1, 0.9\nw -= lr * w.grad\n",
        "w -= lr * w.grad\nb -= eta * b.grad\nlr = eta = 0.1\n",  # two names
        "total -= 0.5 * other\n",  # no gradient read: not an update
    ],
)
def test_a_rate_that_is_not_one_number_of_this_file_gets_no_patch(source):
    assert _lowered(source) is None


def test_a_placed_lower_own_rate_has_the_next_decade_as_its_stronger_fix(tmp_path):
    # A tutorial's rate of 1e-4 a tenth lower still diverged; a hundredth trained. The
    # confirmation reruns the stronger patch when the first one's copy fails.
    from gradient_doctor.core.findings import Finding, Fix, SourceLine
    from gradient_doctor.core.fix_placement import FixSites, place_fixes

    source = "lr = 1e-4\nfor t in range(9):\n    loss.backward()\n    w -= lr * w.grad\n"
    (tmp_path / "train.py").write_text(source)
    finding = Finding(
        category="exploding_gradients",
        step=10,
        phase=None,
        origin=None,
        explanation="x",
        fixes=(Fix("lower_learning_rate", "Lower the learning rate 10x", "lr"),),
    )
    backward = SourceLine("train.py", 3, "loss.backward()")
    (fix,) = place_fixes(finding, str(tmp_path), FixSites(own_update=backward)).fixes
    assert "+lr = 1e-05" in fix.patch
    assert fix.title.endswith("10x, from 0.0001 to 1e-05")
    assert "+lr = 1e-06" in fix.stronger.patch
    assert fix.stronger.title.endswith("100x, from 0.0001 to 1e-06")
    assert fix.stronger.stronger is None
