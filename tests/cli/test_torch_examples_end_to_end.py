"""The bundled PyTorch examples (examples/torch/), diagnosed through the real CLI.

Each example is copied alone into a fresh folder and run from there with
`gradient-doctor run` (`--confirm never`, but where a test needs the patch proved): the
four stories' category, op, line, phase and step range as their docstrings say; the
healthy runs exit 0 with no problem and no warning, printing exactly what plain
`python` prints. The runs use one torch thread (`OMP_NUM_THREADS=1`): on two cores
shared with another test worker, torch's intra-op threads spin against each other and
a tiny model's step takes 30x as long.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, DoctorRun, line_of, run_doctor

pytestmark = pytest.mark.slow

EXAMPLES = "examples/torch"
_runs: dict[tuple[str, str], DoctorRun] = {}


@pytest.fixture(scope="module")
def example_run(tmp_path_factory):
    """The doctor's run (once per module and confirm mode) of an example copied alone."""

    def get(name: str, confirm: str = "never") -> DoctorRun:
        if (name, confirm) not in _runs:
            folder = tmp_path_factory.mktemp(Path(name).stem)
            shutil.copy(ROOT / EXAMPLES / name, folder / name)
            with pytest.MonkeyPatch.context() as patched:
                patched.setenv("OMP_NUM_THREADS", "1")
                run = run_doctor(name, tmp=folder, options=("--confirm", confirm), cwd=folder)
            _runs[name, confirm] = run
        return _runs[name, confirm]

    return get


def _plain(name: str, tmp_path: Path) -> str:
    """What `python example` prints, run alone in its own folder."""
    shutil.copy(ROOT / EXAMPLES / name, tmp_path / name)
    done = subprocess.run(
        [sys.executable, name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    return done.stdout


def _origin(problem: dict) -> tuple:
    origin = problem["origin"]
    return origin["op"], origin["file"], origin["line"]


def _families(problem: dict) -> list[str]:
    return [fix["family"] for fix in problem["fixes"]]


def test_story1_the_hand_written_segment_softmax_overflows_at_its_exp(example_run):
    name = "story1_gnn_softmax_overflow.py"
    run = example_run(name)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (run.report["framework"], problem["category"], problem["phase"]) == (
        "torch",
        "forward_overflow",
        "forward",
    )
    line = line_of(f"{EXAMPLES}/{name}", "w = torch.exp(scores)")
    assert _origin(problem) == ("exp", name, line)
    assert problem["origin"]["layer"].endswith("message_passing")
    assert problem["origin"]["inputs"][0]["max"] > 88.72
    assert problem["origin"]["outputs"][0]["inf"] > 0
    assert 100 < problem["step"] < 600  # after many steps of a slow drift
    assert run.report["steps_watched"] == problem["step"] + 1
    assert "gradient_clipping" in [n["remedy"] for n in problem["not_fixes"]]
    # The max-shift, spelled in PyTorch over the segments the sum normalises.
    assert "stable_softmax" in _families(problem)
    assert "tf." not in json.dumps(problem["fixes"])
    # Warned before: the exp's largest input, measured on the sampled forwards, neared
    # float32's limit; the warning's fixes are spelled in PyTorch too.
    (warning,) = [w for w in run.report["warnings"] if (w["origin"] or {}).get("op") == "exp"]
    assert warning["category"] == "forward_overflow"
    assert (warning["origin"]["line"], warning["origin"]["layer"]) == (line, "message_passing")
    assert problem["step"] - warning["step"] >= 50
    assert warning["headroom"]["limit"] == pytest.approx(88.72, abs=0.01)
    assert warning["fixes"] and "tf." not in json.dumps(warning["fixes"])


def test_story2_the_hand_written_penalty_norm_at_a_zero_row_is_a_backward_singularity(
    example_run,
):
    name = "story2_wgan_gp_norm.py"
    run = example_run(name)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["phase"]) == ("backward_singularity", "backward")
    line = line_of(f"{EXAMPLES}/{name}", "norm = torch.sqrt((grads**2).sum(dim=1))")
    assert _origin(problem)[1:] == (name, line)
    assert problem["origin"]["gradient_of"] == "sqrt"
    assert any(values["zeros"] > 0 for values in problem["origin"]["inputs"])  # the zero row
    assert 10 < problem["step"] < 600
    assert "safe_norm" in _families(problem)
    assert "gradient_clipping" in [n["remedy"] for n in problem["not_fixes"]]


def test_story2_the_safe_norm_patch_is_proved_by_a_patched_copy_run_from_the_start(
    example_run,
):
    problem = example_run("story2_wgan_gp_norm.py", confirm="always").problem
    fix = next(f for f in problem["fixes"] if f["family"] == "safe_norm")
    assert fix["patch"] and "torch.sqrt((grads**2).sum(dim=1)" in fix["patch"]
    assert fix["verified"] is True, fix["evidence"]
    assert "patched copy" in fix["evidence"]


def test_story3_growing_gradients_under_a_too_high_rate_are_exploding_gradients(example_run):
    name = "story3_exploding_gradients.py"
    run = example_run(name)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["phase"]) == ("exploding_gradients", "forward")
    line = line_of(f"{EXAMPLES}/{name}", "loss = F.mse_loss(model(x), y)")
    assert _origin(problem)[1:] == (name, line)
    assert 50 < problem["step"] < 400
    assert set(_families(problem)[:2]) == {"lower_learning_rate", "gradient_clipping"}
    clipping = next(f for f in problem["fixes"] if f["family"] == "gradient_clipping")
    assert "torch.nn.utils.clip_grad_norm_" in clipping["code"]
    assert "grew from" in problem["explanation"]


def test_story4_argmax_tokens_cut_the_whole_generator_at_step_zero(example_run):
    name = "story4_text_gan_argmax.py"
    run = example_run(name)
    assert run.exit_code == 1, run.stderr[-3000:]
    assert run.report["steps_watched"] == 1  # training stopped: nothing of it can learn
    (problem,) = run.report["problems"]  # the discriminator's optimizer is not flagged
    assert (problem["category"], problem["step"]) == ("disconnected_gradients", 0)
    cut = problem["disconnected"]
    assert cut["all"] is True
    assert len(cut["variables"]) == 35  # every parameter of the Generator
    assert {"to_vocab.weight", "embed.weight", "queries"} <= set(cut["variables"])
    assert not any(v.startswith(("classify", "text_embed")) for v in cut["variables"])
    line = line_of(f"{EXAMPLES}/{name}", "tokens = gen_logits.argmax(dim=-1)")
    assert (cut["break"]["op"], cut["break"]["file"], cut["break"]["line"]) == (
        "ArgMax",
        name,
        line,
    )
    assert {"soft_embedding", "gumbel_softmax", "reinforce", "straight_through"} <= set(
        _families(problem)
    )
    assert "F.gumbel_softmax(" in json.dumps(problem["fixes"])
    assert "PyTorch raises nothing" in problem["explanation"]


@pytest.mark.parametrize("name", ["healthy_cnn.py", "healthy_transformer.py", "healthy_dqn.py"])
def test_healthy_examples_stay_healthy_and_print_what_plain_python_prints(
    example_run, name, tmp_path
):
    run = example_run(name)
    assert run.exit_code == 0, run.stderr[-3000:]
    assert run.report["status"] == "healthy"
    assert (run.report["problems"], run.report["warnings"]) == ([], [])
    assert run.report["steps_watched"] > 40
    printed = _plain(name, tmp_path)
    assert printed.count("loss") > 3
    assert run.stdout == printed
