"""PyTorch optimizer fixes through the real CLI: patches of the user's file, proved by reruns.

Story 3 in PyTorch (a deep MLP whose SGD rate, warmed up by `LambdaLR`, is too high)
is run with `gradient-doctor run --confirm always` from a folder holding only it: the
lower learning rate is a patch of the line that built the optimizer, clipping a line
inserted before `optimizer.step()`, each confirmed by a patched copy run from the
start against the unchanged copy. The printed patch is then applied with the
system's `patch -p1` to a fresh copy, which trains healthy under the doctor.
"""

import json
import os
import shutil
import subprocess

import pytest

from tests.conftest import ROOT, doctor_command, line_of, run_doctor

pytestmark = pytest.mark.slow

NAME = "story3_exploding_gradients.py"
EXAMPLE = f"examples/torch/{NAME}"


@pytest.fixture(scope="module")
def confirmed(tmp_path_factory):
    """The problem of the doctor's run of story 3 with every patch confirmed."""
    folder = tmp_path_factory.mktemp("story3")
    shutil.copy(ROOT / EXAMPLE, folder / NAME)
    with pytest.MonkeyPatch.context() as patched:
        patched.setenv("OMP_NUM_THREADS", "1")  # two shared cores: no spinning threads
        run = run_doctor(NAME, tmp=folder, options=("--confirm", "always"), cwd=folder)
    assert run.report is not None and run.report["problems"], run.stderr[-3000:]
    return run.report["problems"][0]


def _fix(problem: dict, family: str) -> dict:
    return next(f for f in problem["fixes"] if f["family"] == family)


def _added(patch: str) -> list[str]:
    return [line[1:] for line in patch.splitlines() if line.startswith("+") and line[1:2] != "+"]


def test_the_lower_rate_patch_scales_the_constructor_lr_and_is_confirmed(confirmed):
    fix = _fix(confirmed, "lower_learning_rate")
    line = line_of(EXAMPLE, "optimizer = torch.optim.SGD(")
    assert f"@@ -{line - 3},7 +{line - 3},7 @@" in fix["patch"]
    assert _added(fix["patch"]) == [
        "    optimizer = torch.optim.SGD(model.parameters(), lr=PEAK_LEARNING_RATE * 0.1)"
    ]
    assert fix["title"] == "Lower the learning rate 10x, from 2 to 0.2"
    assert fix["verified"] is True, fix["evidence"]
    assert fix["evidence"].startswith("confirmed: the patched copy"), fix["evidence"]
    assert "the unchanged copy, run from the start, found exploding_gradients" in fix["evidence"]


def test_the_clipping_patch_is_a_line_before_the_step_at_the_median_norm(confirmed):
    fix = _fix(confirmed, "gradient_clipping")
    (added,) = _added(fix["patch"])
    assert added.startswith("            torch.nn.utils.clip_grad_norm_(model.parameters(), ")
    bound = float(added.split("max_norm=")[1].rstrip(")"))
    assert 0 < bound < 10  # the median of the healthy norms, not the exploded ones
    step = line_of(EXAMPLE, "optimizer.step()")
    lines = fix["patch"].splitlines()
    assert lines[lines.index(f"+{added}") + 1] == "             optimizer.step()"  # right before
    assert f"@@ -{step - 3},6 +{step - 3},7 @@" in fix["patch"]
    # Clipped at the median norm under a rate still warming up to 2.0, the copy ran
    # finite but its first layers stopped learning: the per-module norms show it, and
    # a patch that only keeps the run finite is not verified.
    assert fix["verified"] is False, fix["evidence"]
    assert "found vanishing_gradients at step" in fix["evidence"]


def test_the_printed_patch_applied_with_patch_p1_trains_healthy(confirmed, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(ROOT / EXAMPLE, copy / NAME)
    patch = _fix(confirmed, "lower_learning_rate")["patch"]
    subprocess.run(["patch", "-p1", "--batch"], input=patch, text=True, cwd=copy, check=True)
    assert "lr=PEAK_LEARNING_RATE * 0.1" in (copy / NAME).read_text()
    report = tmp_path / "rerun.json"
    completed = subprocess.run(
        [*doctor_command(), "run", "--trial-steps", "0", "--report", str(report), NAME],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    rerun = json.loads(report.read_text())
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert rerun["problems"] == [], rerun["problems"]
    assert rerun["steps_watched"] > confirmed["step"]


def test_a_rate_said_only_to_delay_an_overflow_is_rerun_and_becomes_the_fix(tmp_path):
    # The forward-overflow rule expects a lower rate only to delay a drift; no trial
    # inside the run can try it on an unchanged script, so the confirmation reruns its
    # patch: here the rate is the cause, and the patched copy trains healthy.
    name = "poisson_exp_link_high_rate.py"
    shutil.copy(ROOT / "tests" / "scripts" / "torch" / name, tmp_path / name)
    with pytest.MonkeyPatch.context() as patched:
        patched.setenv("OMP_NUM_THREADS", "1")
        run = run_doctor(name, tmp=tmp_path, options=("--confirm", "always"), cwd=tmp_path)
    (problem,) = run.report["problems"]
    assert (problem["category"], problem["step"], problem["origin"]["op"]) == (
        "forward_overflow",
        2,
        "exp",
    )
    assert "lower_learning_rate" not in [n["remedy"] for n in problem["not_fixes"]]
    fix = _fix(problem, "lower_learning_rate")
    assert fix["verified"] is True, fix["evidence"]
    assert fix["evidence"].startswith("confirmed: the patched copy of your files trained")
    assert (
        "where the unchanged copy, run from the start, found forward_overflow at step 2"
        in (fix["evidence"])
    )
    assert _added(fix["patch"]) == ["opt = torch.optim.SGD(model.parameters(), lr=0.1)"]
