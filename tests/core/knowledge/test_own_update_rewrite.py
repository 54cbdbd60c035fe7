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
