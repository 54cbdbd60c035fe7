"""End to end through the real CLI: an optimizer whose own update overflows float16.

Under the pure "float16" policy Adam keeps its slots in float16; a gradient past 256
squares past 65504 into `velocity`, and the next update writes NaN into the weights,
with every loss and gradient the guard checked still finite. The doctor names the
update (not the weights' reader), says the updates were applied, and proves the mixed
policy by a patched copy run from the start; applied by hand, that patch trains
healthy, and watching it changes nothing.
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, doctor_command, line_of, run_doctor

pytestmark = pytest.mark.slow

SCRIPT = "tests/scripts/float16_adam_tape_loop.py"


def test_the_update_that_squared_past_float16_is_the_origin(doctor_run):
    run = doctor_run(SCRIPT)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["step"], problem["phase"]) == (
        "optimizer_overflow",
        0,
        None,
    )
    origin = problem["origin"]
    assert (origin["op"], origin["variable"], origin["layer"]) == (
        "Square",
        "dense_1/kernel",
        "dense_1",
    )
    assert origin["source_kind"] == "optimizer_creation"
    assert origin["line"] == line_of(SCRIPT, "optimizer = keras.optimizers.Adam(")
    assert origin["inputs"][0]["dtype"] == "float16"
    assert origin["inputs"][0]["inf"] == 0 and origin["outputs"][0]["inf"] > 0
    explanation = problem["explanation"]
    policy_line = line_of(SCRIPT, 'set_global_policy("float16")')
    for fact in (
        "The NaN that step 2 read in `dense/kernel`",
        "written by the optimizer's own update at step 1",
        f'Under the dtype policy "float16" ({SCRIPT}:{policy_line})',
        "float16 holds at most 65504",
        "on 2 batches the run saw, the updates went as in the run",
        "at step 0 the gradients of",
        "`adam/dense_kernel_velocity` (float16, ",
        "Adam's `velocity` holds a running mean of each gradient's square",
        "At step 1 the update read those values back",
        "so those updates were applied",
    ):
        assert fact in explanation, (fact, explanation)
    # The skip of step 2's update is not said to have kept the weights.
    printed = re.sub(r"[│\s]+", " ", run.stderr)  # the terminal's box, unwrapped
    assert "stopped this step before it reached the weights" not in printed
    assert "the weights were already NaN or Inf when it began" in printed

    mixed = problem["fixes"][0]
    assert (mixed["family"], mixed["verified"]) == ("mixed_precision", True)
    assert '-keras.mixed_precision.set_global_policy("float16")' in mixed["patch"]
    assert '+keras.mixed_precision.set_global_policy("mixed_float16")' in mixed["patch"]
    # No trial inside the run can rebuild the model under a new policy: the patched copy
    # run from the start proved it, against the unchanged copy, which failed again.
    assert (
        "not tried inside the run: a dtype policy sets each variable's dtype" in mixed["evidence"]
    )
    assert mixed["evidence"].startswith("confirmed: the patched copy of your files trained")
    assert "the unchanged copy, run from the start, found optimizer_overflow" in mixed["evidence"]
    clip = next(fix for fix in problem["fixes"] if fix["family"] == "clip_by_value")
    assert clip["verified"] is True and "clipvalue=1.0" in clip["patch"]

    not_fixes = {item["remedy"]: item for item in problem["not_fixes"]}
    assert not_fixes["lower_learning_rate"]["structural"] is True  # step 0's square
    assert not_fixes["optimizer_epsilon"]["structural"] is True
    assert not_fixes["loss_scaling"]["structural"] is True
    assert "not finite again" in not_fixes["gradient_clipping"]["evidence"]


def _printed(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(("losses ", "weights "))]


def test_the_mixed_policy_patch_applied_by_hand_trains_healthy_and_unchanged_watched(
    doctor_run, tmp_path
):
    patch = doctor_run(SCRIPT).problem["fixes"][0]["patch"]
    copy = tmp_path / "copy"
    folder = Path(SCRIPT).parent
    shutil.copytree(ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["patch", "-p1", "--batch"], input=patch, text=True, cwd=copy, check=True)
    plain = subprocess.run(
        [sys.executable, SCRIPT], cwd=copy, capture_output=True, text=True, timeout=300
    )
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert "nan" not in " ".join(_printed(plain.stdout))
    report = tmp_path / "report.json"
    watched = subprocess.run(
        [*doctor_command(), "run", "--report", str(report), SCRIPT],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert watched.returncode == 0, watched.stderr[-3000:]
    assert _printed(watched.stdout) == _printed(plain.stdout)  # bit-identical
    assert len(_printed(plain.stdout)) == 2


_FIT = """\
import keras
import numpy as np

keras.config.set_dtype_policy("float16")
keras.utils.set_random_seed(1)
x = np.random.default_rng(1).uniform(0.0, 255.0, size=(256, 16)).astype("float32")
model = keras.Sequential(
    [keras.Input((16,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(16)]
)
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
model.fit(x, x, batch_size=32, epochs=2, shuffle={shuffle}, verbose=0)
"""


@pytest.mark.parametrize(
    ("shuffle", "step", "op"), [(False, 0, "Square"), (True, 1, "ReadVariableOp")]
)
def test_fit_is_replayed_on_its_data_and_only_an_exact_replay_names_an_earlier_step(
    tmp_path, shuffle, step, op
):
    # `fit`'s data read anew is the run's own in order, not shuffled: only where the
    # replayed updates leave the weights as the run's, bit for bit, are its steps the run's.
    script = tmp_path / "fit_float16.py"
    script.write_text(_FIT.format(shuffle=shuffle))
    run = run_doctor(script, tmp=tmp_path, options=("--trial-steps", "0"))
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["step"]) == ("optimizer_overflow", step)
    assert problem["origin"]["op"] == op
    assert problem["origin"]["source_kind"] == "optimizer_creation"
    assert ("the updates went as in the run" in problem["explanation"]) is not shuffle
    assert "batches of the training data" in problem["explanation"]
