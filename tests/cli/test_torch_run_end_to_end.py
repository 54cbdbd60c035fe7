"""`gradient-doctor run train.py` on unchanged PyTorch scripts, in several styles.

Each script is copied alone into a fresh folder and run from there through the real
CLI: the global optimizer hooks catch the failing update before it is applied, the
seeded rerun records that step in a child process, the origin is named (op, line,
phase, step), and each proposed patch is judged by a patched copy of the folder run
again from the start (`--confirm always`); a verified patch is then applied with
`patch -p1` and the script run plainly, to see it hold. A healthy script's printed
losses and final weights are the same, bit for bit, watched or not.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, DoctorRun, line_of, run_doctor

pytestmark = pytest.mark.slow

SCRIPTS = "tests/scripts/torch"
_runs: dict[str, tuple[DoctorRun, Path]] = {}


@pytest.fixture(scope="module")
def torch_run(tmp_path_factory):
    """The doctor's run (once per module) of a torch script copied alone into a folder."""

    def get(name: str, confirm: str = "always") -> tuple[DoctorRun, Path]:
        if name not in _runs:
            folder = tmp_path_factory.mktemp(Path(name).stem)
            shutil.copy(ROOT / SCRIPTS / name, folder / name)
            run = run_doctor(name, tmp=folder, options=("--confirm", confirm), cwd=folder)
            _runs[name] = (run, folder)
        return _runs[name]

    return get


def _plain(script: Path, cwd: Path) -> str:
    """What `python script` prints, run alone."""
    done = subprocess.run(
        [sys.executable, script.name], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    return done.stdout


def _verified_patch_holds(problem: dict, name: str, folder: Path, tmp_path: Path) -> dict:
    """The verified fix; its patch applied to a copy with `patch -p1`, the copy run plainly,
    prints only finite losses."""
    verified = [fix for fix in problem["fixes"] if fix["verified"] is True]
    assert verified, [(f["family"], f["verified"], f["evidence"]) for f in problem["fixes"]]
    fix = verified[0]
    assert fix["patch"] and "patched copy" in fix["evidence"]
    _patch_holds(fix, name, folder, tmp_path)
    return fix


def _patch_holds(fix: dict, name: str, folder: Path, tmp_path: Path) -> None:
    """`fix`'s patch applied to a copy with `patch -p1`, the copy run plainly, prints only
    finite losses (the proof without the doctor's own reruns)."""
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(folder / name, copy / name)
    subprocess.run(["patch", "-p1", "--batch"], input=fix["patch"], text=True, cwd=copy, check=True)
    printed = _plain(copy / name, copy)
    assert printed and "nan" not in printed and "inf" not in printed, printed[-500:]


def test_a_module_level_loop_names_the_hand_written_log_and_its_patch_holds(torch_run, tmp_path):
    name = "module_loop_log_sigmoid.py"
    run, folder = torch_run(name)
    plain = _plain(folder / name, folder)
    failing = next(n for n, line in enumerate(plain.splitlines()) if "nan" in line)
    assert run.exit_code == 1, run.stderr[-3000:]
    assert (run.report["framework"], run.report["steps_watched"]) == ("torch", failing + 1)
    problem = run.problem
    assert (problem["category"], problem["step"], problem["phase"]) == (
        "forward_domain",
        failing,
        "forward",
    )
    origin = problem["origin"]
    assert (origin["op"], origin["file"], origin["line"]) == (
        "log",
        name,
        line_of(f"{SCRIPTS}/{name}", "log_q = torch.log(1 - p)"),
    )
    assert origin["inputs"][0]["zeros"] > 0 and origin["outputs"][0]["inf"] > 0
    assert problem["skipped_updates"] == 1
    assert f"the rerun reproduced step {failing}" in run.stderr
    fix = _verified_patch_holds(problem, name, folder, tmp_path)
    assert "log_q = torch.log(1 - p)" in fix["patch"]


def test_a_trainer_class_names_the_roots_gradient_at_a_zero_distance(torch_run, tmp_path):
    name = "trainer_class_sqrt_norm.py"
    run, folder = torch_run(name)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["step"], problem["phase"]) == (
        "backward_singularity",
        5,
        "backward",
    )
    origin = problem["origin"]
    assert (origin["op"], origin["gradient_of"]) == ("div", "sqrt")
    assert "SqrtBackward0" in origin["op_name"]
    assert (origin["file"], origin["line"]) == (
        name,
        line_of(f"{SCRIPTS}/{name}", "distance = torch.sqrt((d**2).sum(dim=1))"),
    )
    # One pair of the batch is a row with itself: one zero distance, one infinite slope.
    assert origin["inputs"][1]["zeros"] == 1 and origin["outputs"][0]["inf"] == 1
    assert run.report["steps_watched"] == 6
    _verified_patch_holds(problem, name, folder, tmp_path)


def test_two_optimizers_make_one_step_and_the_critics_update_is_named(torch_run, tmp_path):
    name = "gan_two_optimizers.py"
    run, folder = torch_run(name)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    # 44 rows in batches of 8: iteration 5 is the first padded batch, each iteration one step.
    assert (problem["category"], problem["step"], problem["phase"]) == (
        "backward_singularity",
        5,
        "backward",
    )
    assert run.report["steps_watched"] == 6
    origin = problem["origin"]
    assert (origin["op"], origin["gradient_of"], origin["line"]) == (
        "div",
        "sqrt",
        line_of(f"{SCRIPTS}/{name}", "norm = torch.sqrt((g**2).sum(dim=1))"),
    )
    padded = 8 - 44 % 8
    assert origin["inputs"][1]["zeros"] == padded and origin["outputs"][0]["inf"] == padded
    _verified_patch_holds(problem, name, folder, tmp_path)


def test_a_healthy_run_is_bit_identical_to_plain_python(torch_run):
    name = "healthy_accumulation.py"
    run, folder = torch_run(name, confirm="never")
    assert run.exit_code == 0, run.stderr[-3000:]
    assert run.report["status"] == "healthy" and not run.report["problems"]
    plain = _plain(folder / name, folder)
    printed = [line for line in run.stdout.splitlines() if line.startswith(("epoch", "weights"))]
    assert printed == plain.splitlines() and len(printed) == 25
    assert run.report["steps_watched"] == 24  # 16 batches an epoch, 2 per update, 3 epochs


# Its data depends on a file the first run writes outside its folder (what it made in its
# folder a rerun's copy leaves out): its rerun cannot fail the same way.
_CHANGING_DATA = """
import os
import sys
import torch

first = not os.path.exists(sys.argv[1])
open(sys.argv[1], "w").close()
torch.manual_seed(0)
weight = torch.nn.Parameter(torch.ones(3))
optimizer = torch.optim.SGD([weight], lr=0.1)
for step in range(6):
    x = torch.randn(3)
    if first and step == 3:
        x = x / 0.0
    loss = (weight * x).sum() ** 2
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_a_rerun_that_does_not_fail_the_same_way_says_so(tmp_path):
    (tmp_path / "folder").mkdir()
    script = tmp_path / "folder" / "changing_data.py"
    script.write_text(_CHANGING_DATA)
    run = run_doctor(script.name, str(tmp_path / "seen"), tmp=tmp_path, cwd=script.parent)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert problem["step"] == 3 and problem["origin"] is None
    assert "replaying the step stayed finite" in problem["explanation"]
    assert "so the failure was not reproduced" in run.stderr
    assert json.loads(json.dumps(run.report))["framework"] == "torch"


def test_torchs_own_warnings_are_shown_as_the_plain_run_shows_them(tmp_path):
    script = "tests/scripts/torch/warns_in_forward.py"
    plain = subprocess.run(
        [sys.executable, script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    run = run_doctor(script, tmp=tmp_path, options=("--trial-steps", "0"))
    assert run.exit_code == 0, run.stderr[-3000:]

    def warned(stderr: str) -> list[str]:
        return [line for line in stderr.splitlines() if "Warning:" in line]

    expected = [f"{ROOT / script}:{line_of(script, 'float(loss)')}: UserWarning: Converting"]
    assert [line[: len(expected[0])] for line in warned(plain.stderr)] == expected
    assert warned(run.stderr) == warned(plain.stderr)


def test_a_no_grad_block_around_a_modules_call_is_named_at_that_call(tmp_path):
    script = "tests/scripts/torch/no_grad_around_own_encoder.py"
    run = run_doctor(script, tmp=tmp_path, options=("--trial-steps", "0"))
    problem = run.problem
    assert problem["category"] == "disconnected_gradients", problem["explanation"]
    broken = problem["disconnected"]
    assert sorted(broken["variables"]) == [
        "encoder.conv1.bias",
        "encoder.conv1.weight",
        "encoder.conv2.bias",
        "encoder.conv2.weight",
    ]
    assert broken["all"] is False
    assert broken["break"]["op"] == "Conv1D"
    assert broken["break"]["line"] == line_of(script, "feats = self.encoder(x)")


def test_parameters_cut_where_no_rerun_can_reach_are_still_reported(tmp_path, monkeypatch):
    # The script counts its runs in a file outside its folder and trains shorter once it
    # exists: the seeded rerun ends before the step whose gradients are cut, so the break
    # cannot be named; the parameters that stop training are still the problem.
    monkeypatch.setenv("RUNS_FILE", str(tmp_path / "runs.txt"))
    script = "tests/scripts/torch/unrepeatable_cut.py"
    run = run_doctor(script, tmp=tmp_path)
    assert run.exit_code == 1, run.stderr[-3000:]
    assert run.report["steps_watched"] == 20  # a part of the optimizer: training went on
    (problem,) = run.report["problems"]
    # The parameters trained at steps 0-7: a part that trained before is reported once it
    # went PERSISTENT_UPDATES (10) updates in a row without a gradient (at step 17), dated
    # to the step it first had none, 8.
    assert (problem["category"], problem["step"]) == ("disconnected_gradients", 8)
    assert problem["disconnected"] == {
        "variables": ["encoder.0.weight", "encoder.0.bias"],  # the script's own names
        "all": False,
        "break": None,
    }
    assert (
        "Where their path to the loss breaks was not found (the rerun of your script "
        in (problem["explanation"])
    )
    assert "never reached update 17" in problem["explanation"]


def test_a_softmax_over_an_empty_sequences_masked_row_is_named_and_its_fill_patched(
    torch_run, tmp_path
):
    # The -inf mask is meant: the NaN is the softmax's, 0 / 0 in the row of a sequence
    # with no token; the loss leaves padded queries out, so it stays finite.
    name = "padded_batches_empty_sequence.py"
    run, folder = torch_run(name)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["step"], problem["phase"]) == (
        "forward_domain",
        4,
        "forward",
    )
    origin = problem["origin"]
    assert (origin["op"], origin["layer"], origin["line"]) == (
        "_softmax",
        "mixer",  # the script's own name: it calls three modules apart (embed, mixer, head)
        line_of(f"{SCRIPTS}/{name}", "weights = torch.softmax(scores, dim=-1)"),
    )
    assert "-inf in every entry" in problem["explanation"]
    fill = line_of(
        f"{SCRIPTS}/{name}", 'scores = scores.masked_fill(pad.unsqueeze(1), float("-inf"))'
    )
    assert f"{name}:{fill}" in problem["explanation"]
    fix = _verified_patch_holds(problem, name, folder, tmp_path)
    assert fix["family"] == "finite_mask"
    assert "torch.finfo(scores.dtype).min" in fix["patch"]


def test_a_closure_step_that_went_non_finite_is_reported_and_undone(torch_run):
    # LBFGS computes its losses inside `optimizer.step(closure)`: the step is checked
    # after it ran. Before, such a run was reported healthy with 0 steps watched.
    name = "lbfgs_identity_link.py"
    run, _ = torch_run(name, confirm="never")
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert problem["origin"] is None
    assert "optimizer.step(closure)" in problem["explanation"]
    assert "put the weights and the optimizer's state back" in problem["explanation"]
    assert run.report["steps_watched"] == problem["step"] + 1 >= 1


def test_under_gradient_accumulation_each_micro_batchs_loss_is_checked(torch_run):
    # The log of a probability rounded to 0 is -inf in the forward pass of a micro-batch
    # before the last: it is that op, forward, not the gradient of the log as seen from
    # the last micro-batch's loss alone.
    name = "accumulated_log_probability.py"
    run, _ = torch_run(name, confirm="never")
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["phase"]) == ("forward_domain", "forward")
    origin = problem["origin"]
    assert (origin["op"], origin["line"]) == (
        "log",
        line_of(f"{SCRIPTS}/{name}", "nll = -torch.log(p_label).mean() / ACCUMULATE"),
    )
    assert origin["outputs"][0]["inf"] > 0


def test_an_overflow_thrown_by_one_huge_update_gets_clipping_verified(torch_run, tmp_path):
    # One glitched count makes one update 1400x the others; the next forward exp
    # overflows. Clipping was ruled out "structurally" for every forward problem before.
    name = "counts_outlier_batch.py"
    run, folder = torch_run(name)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["phase"], problem["origin"]["op"]) == (
        "forward_overflow",
        "forward",
        "exp",
    )
    assert "The update at step 6 had a gradient norm of 3866" in problem["explanation"]
    assert "gradient_clipping" not in [item["remedy"] for item in problem["not_fixes"]]
    fix = _verified_patch_holds(problem, name, folder, tmp_path)
    assert fix["family"] == "gradient_clipping"
    assert "clip_grad_norm_" in fix["patch"]


def test_a_vmapped_functional_call_inner_loop_runs_healthy_and_bit_identical(torch_run):
    # The sampled forward's statistics once kept wrappers from inside vmap and read them
    # at the next update: the healthy script died with functorch's "tensor escaped".
    name = "healthy_vmap_inner_loop.py"
    run, folder = torch_run(name, confirm="never")
    assert run.exit_code == 0, run.stderr[-3000:]
    assert run.report["status"] == "healthy" and run.report["steps_watched"] == 20
    printed = [line for line in run.stdout.splitlines() if line.startswith("meta")]
    assert printed == _plain(folder / name, folder).splitlines() and len(printed) == 20


def test_a_log_written_as_a_tensor_method_gets_a_torch_patch_that_holds(torch_run, tmp_path):
    # `p.log()` once had no operand the guard could find: the fix was the generic line
    # `y = tf.math.log(tf.maximum(x, 1e-7))`, TensorFlow in a PyTorch script.
    name = "notebook_bce_tensor_methods.py"
    run, folder = torch_run(name)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["phase"], problem["origin"]["op"]) == (
        "forward_domain",
        "forward",
        "log",
    )
    loss_line = "loss = -(y * p.log() + (1 - y) * (1 - p).log()).mean()"
    assert problem["origin"]["line"] == line_of(f"{SCRIPTS}/{name}", loss_line)
    assert not any("tf." in fix["code"] for fix in problem["fixes"])
    fix = _verified_patch_holds(problem, name, folder, tmp_path)
    assert fix["family"] == "safe_log"
    assert "torch.clamp_min((1 - p), 1e-7).log()" in fix["patch"]


def test_a_script_that_updates_its_tensors_itself_is_watched_and_its_rate_patched(
    torch_run, tmp_path
):
    # No optimizer at all, as PyTorch's autograd tutorial trains: once "0 steps
    # watched ... nothing was checked" while the loss went to inf.
    name = "tutorial_own_update_explodes.py"
    run, folder = torch_run(name)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert problem["category"] in ("exploding_gradients", "forward_overflow")
    assert (problem["phase"], problem["origin"]["file"]) == ("forward", name)
    assert problem["own_update"] is True and problem["skipped_updates"] == 1
    assert run.report["steps_watched"] == problem["step"] + 1
    fix = _verified_patch_holds(problem, name, folder, tmp_path)
    assert fix["family"] == "lower_learning_rate"
    assert fix["title"] == "Lower the learning rate of your own update 10x, from 1.5 to 0.15"
    assert "-lr = 1.5\n+lr = 0.15" in fix["patch"]


def test_a_healthy_script_that_updates_its_tensors_itself_is_bit_identical(torch_run):
    name = "healthy_own_update_module.py"
    run, folder = torch_run(name, confirm="never")
    assert run.exit_code == 0, run.stderr[-3000:]
    assert run.report["status"] == "healthy" and run.report["steps_watched"] == 300
    assert run.stdout.splitlines()[:7] == _plain(folder / name, folder).splitlines()


def test_a_log_sum_exp_of_tensor_methods_gets_torchs_logsumexp_and_not_a_clamp(torch_run, tmp_path):
    # The clamp of the exp's input alone once held "finite and falling": the
    # cross-entropy ran to -3111. torch.logsumexp computes the same loss, safely.
    name = "contrastive_methods_logsumexp.py"
    run, folder = torch_run(name)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["phase"], problem["origin"]["op"]) == (
        "forward_overflow",
        "forward",
        "exp",
    )
    line = "return (logits.exp().sum(-1).log() - logits.diagonal()).mean()"
    assert problem["origin"]["line"] == line_of(f"{SCRIPTS}/{name}", line)
    fix = _verified_patch_holds(problem, name, folder, tmp_path)
    assert fix["family"] == "stable_logsumexp"
    assert "return (torch.logsumexp(logits, -1) - logits.diagonal()).mean()" in fix["patch"]
    clamp = next(f for f in problem["fixes"] if f["family"] == "clip_input_domain")
    assert clamp["verified"] is False
    assert "the loss fell below zero without bound" in clamp["evidence"]


def test_regression_targets_in_the_1e5s_are_named_and_clipping_the_early_updates_holds(
    torch_run, tmp_path
):
    # Before: "The doctor has no specific rule for MseLoss", clipping and a lower rate
    # "will not help" (structural claims about updates that threw the output to -1e23).
    name = "dollar_targets_regression.py"
    run, folder = torch_run(name)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["phase"], problem["step"]) == (
        "forward_overflow",
        "forward",
        2,
    )
    assert (problem["origin"]["op"], problem["origin"]["line"]) == (
        "mse_loss",
        line_of(f"{SCRIPTS}/{name}", "loss = loss_fn(model(x[idx]), y[idx])"),
    )
    assert "The targets of MseLoss reach 6.7e+05" in problem["explanation"]
    assert "the 2 updates before this step are the only ones" in problem["explanation"]
    assert problem["fixes"][0]["family"] in ("normalize_target", "gradient_clipping")
    assert "normalize_target" in [fix["family"] for fix in problem["fixes"]]
    assert "gradient_clipping" not in [item["remedy"] for item in problem["not_fixes"]]
    fix = _verified_patch_holds(problem, name, folder, tmp_path)
    assert fix["family"] == "gradient_clipping"


def test_a_nan_in_the_loaders_data_is_bad_input_read_where_the_batch_is_fetched(torch_run):
    # Before: "loss_spike ... no single op could be named; the cause may be
    # nondeterministic", with a lower rate and clipping as its fixes.
    name = "missing_value_loader.py"
    run, _ = torch_run(name, confirm="never")
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["step"]) == ("bad_input", 6)
    assert "the tensor read at missing_value_loader.py:" in problem["explanation"]
    assert "made before this step began: by the data pipeline" in problem["explanation"]
    assert "(shape 640x6) has 1 NaN" in problem["explanation"]
    clean = problem["fixes"][0]
    assert clean["family"] == "clean_input" and "torch.isfinite(x)" in clean["code"]
    assert "tf." not in json.dumps(problem["fixes"])


def test_a_gradient_whose_square_overflows_is_stopped_before_adam_freezes_its_parameter(
    torch_run, tmp_path
):
    # Plainly, Adam's second moment turns inf at step 0 and the layer never moves again:
    # 60 finite steps, the loss flat at 4.497e+20, and the doctor said healthy.
    name = "clamped_exp_rate.py"
    run, folder = torch_run(name)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["step"], problem["origin"]["variable"]) == (
        "exploding_gradients",
        0,
        "weight",
    )
    assert "its square overflows float32" in problem["explanation"]
    clipping = next(item for item in problem["not_fixes"] if item["remedy"] == "gradient_clipping")
    assert clipping["structural"] and "max_norm / inf = 0" in clipping["why"]
    fix = _verified_patch_holds(problem, name, folder, tmp_path)
    assert fix["family"] == "clip_by_value" and "clip_grad_value_" in fix["patch"]


def test_gradients_clipped_to_zero_by_an_infinite_norm_are_not_a_healthy_run(torch_run):
    # clip_grad_norm_ takes the norm of gradients whose squares overflow as inf and scales
    # them by 0: every step finite, nothing moves. This run was reported healthy.
    run, _ = torch_run("clipped_inf_norm.py", confirm="never")
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert problem["category"] == "disconnected_gradients"
    assert sorted(problem["disconnected"]["variables"]) == ["linear.bias", "linear.weight"]
    assert "clip_grad_norm_ over gradients whose squares overflow" in problem["explanation"]
    assert "Keras" not in problem["explanation"] and "tf." not in json.dumps(problem["fixes"])


def test_a_variance_parameter_fed_to_a_root_is_named_and_trained_through_softplus(
    torch_run, tmp_path
):
    # Its patch applied by hand holds (the doctor's own reruns are tested elsewhere).
    name = "noise_variance_parameter.py"
    run, folder = torch_run(name, confirm="never")
    (problem,) = run.report["problems"]
    assert (problem["category"], problem["origin"]["op"]) == ("forward_domain", "sqrt")
    assert problem["origin"]["line"] == line_of(f"{SCRIPTS}/{name}", "sigma = torch.sqrt(")
    assert "Its input is the trained variable `noise_var` itself" in problem["explanation"]
    fix = problem["fixes"][0]
    _patch_holds(fix, name, folder, tmp_path)
    assert fix["family"] == "activation_change"
    assert "torch.sqrt(torch.nn.functional.softplus(model.noise_var) + 1e-6)" in fix["patch"]


def test_nan_a_loader_workers_dataset_wrote_is_traced_to_its_getitem_line(torch_run, tmp_path):
    name = "worker_dataset_flat_spectra.py"
    run, folder = torch_run(name, confirm="never")
    (problem,) = run.report["problems"]
    assert problem["category"] == "bad_input"
    origin = problem["origin"]
    line = line_of(f"{SCRIPTS}/{name}", "s = (s - s.mean()) / s.std()")
    assert (origin["op"], origin["line"]) == ("div", line)
    assert (
        "in `SpectraDataset.__getitem__`, replayed here op by op on item"
        in (problem["explanation"])
    )
    fix = problem["fixes"][0]
    _patch_holds(fix, name, folder, tmp_path)  # applied by hand, run plainly
    assert fix["family"] == "safe_div"
    assert "torch.where(s.std() == 0" in fix["patch"]


def test_a_log_determinant_of_a_reflection_is_named_on_its_line_with_slogdet(torch_run, tmp_path):
    # `.logdet()` runs as aten ops whose NaN is a constant `where` picks for a negative
    # determinant: the op named is the user's call, not the constant. Its patch is
    # applied by hand (the doctor's own reruns are tested elsewhere).
    name = "invertible_conv_flow.py"
    run, folder = torch_run(name, confirm="never")
    (problem,) = run.report["problems"]
    origin = problem["origin"]
    assert (problem["category"], problem["phase"], problem["step"]) == (
        "forward_domain",
        "forward",
        0,
    )
    assert (origin["op"], origin["layer"]) == ("logdet", "steps.0")
    assert origin["line"] == line_of(f"{SCRIPTS}/{name}", "self.weight.logdet()")
    assert origin["inputs"][0]["shape"] == [4, 4]
    assert "the determinant here was negative" in problem["explanation"]
    fix = problem["fixes"][0]
    assert fix["family"] == "log_abs_determinant"
    assert "h * w * torch.linalg.slogdet(self.weight).logabsdet" in fix["patch"]
    _patch_holds(fix, name, folder, tmp_path)


def test_a_script_that_raises_on_its_own_non_finite_norm_still_gets_its_diagnosis(
    torch_run, tmp_path
):
    # The clipping's own check raises before `opt.step()` (torch's code, not a test the
    # doctor follows), so no update is ever checked: the update it never made is, while
    # its exception unwinds. The exception stays the script's (printed, its status
    # kept), and no update is said to be skipped.
    name = "raises_on_nonfinite_norm.py"
    run, folder = torch_run(name, confirm="never")
    assert run.exit_code == 1
    assert "is non-finite, so it cannot be clipped" in run.stderr  # torch's own error
    assert run.report["script_error"].startswith("RuntimeError")
    (problem,) = run.report["problems"]
    origin = problem["origin"]
    assert (problem["category"], problem["phase"], problem["step"]) == (
        "backward_singularity",
        "backward",
        49,
    )
    assert (origin["op"], origin["gradient_of"]) == ("pow", "pow")
    assert origin["line"] == line_of(f"{SCRIPTS}/{name}", "loss = ((pred - y[idx]).abs() ** 0.8)")
    assert "update was skipped" not in run.stderr
    fix = problem["fixes"][0]
    _patch_holds(fix, name, folder, tmp_path)
    assert "step 250 loss" in _plain(tmp_path / "copy" / name, tmp_path / "copy")


def test_a_ctc_target_longer_than_its_input_is_named_and_zero_infinity_holds(torch_run, tmp_path):
    # No alignment exists: the loss is inf for any logits (not an overflow); the patch
    # that zeroes such an example's loss is applied by hand and trains to the end.
    name = "ctc_functional_short_clip.py"
    run, folder = torch_run(name, confirm="never")
    (problem,) = run.report["problems"]
    origin = problem["origin"]
    assert (problem["category"], problem["step"], origin["op"]) == (
        "forward_domain",
        7,
        "_ctc_loss",
    )
    assert origin["line"] == line_of(f"{SCRIPTS}/{name}", "loss = F.ctc_loss(")
    assert "an input of 3 frames holds no target" in problem["explanation"]
    assert {n["remedy"]: n["structural"] for n in problem["not_fixes"]} == {
        "gradient_clipping": True,
        "lower_learning_rate": True,
        "larger_batch": True,
    }
    fix = problem["fixes"][0]
    assert "label_lengths, blank=0, zero_infinity=True)" in fix["patch"]
    _patch_holds(fix, name, folder, tmp_path)
    assert "step 20 loss" in _plain(tmp_path / "copy" / name, tmp_path / "copy")


def test_a_distributions_scale_from_a_raw_head_gets_softplus_where_the_head_is_read(
    torch_run, tmp_path
):
    # The log is torch.distributions' own (inside log_prob, on the user's loss line); its
    # input is a Linear's raw output two frames up: the patch goes to that line.
    name = "heteroscedastic_normal_head.py"
    run, folder = torch_run(name, confirm="never")
    (problem,) = run.report["problems"]
    assert (problem["category"], problem["origin"]["op"]) == ("forward_domain", "log")
    assert "the value is a layer's output, which nothing keeps positive" in (problem["explanation"])
    fix = problem["fixes"][0]
    assert fix["family"] == "activation_change"
    assert "+        scale = torch.nn.functional.softplus(self.scale(h)) + 1e-6" in fix["patch"]
    _patch_holds(fix, name, folder, tmp_path)


def test_an_engine_that_exits_on_a_nonfinite_loss_item_is_diagnosed_and_its_patch_holds(
    torch_run, tmp_path
):
    # MAE's and DeiT's engines read the loss with `.item()` and `sys.exit(1)` before any
    # `backward()`: no gradient is ever checked. Their own test of it
    # (`math.isfinite(loss_value)`) finds it not finite: training stops right there, its
    # step replayed and the first op to write NaN named, in the forward.
    name = "pixel_norm_pretraining_exits.py"
    run, folder = torch_run(name, confirm="never")
    assert run.exit_code == 1
    assert "Loss is nan, stopping training" not in run.stdout  # stopped at the test
    assert run.report["status"] == "problem" and "script_error" not in run.report
    (problem,) = run.report["problems"]
    origin = problem["origin"]
    assert (problem["category"], problem["phase"], problem["step"]) == (
        "forward_domain",
        "forward",
        _plain(folder / name, folder).count("loss "),  # the steps that printed a loss
    )
    assert origin["op"] == "div"
    assert origin["line"] == line_of(f"{SCRIPTS}/{name}", "return (patches - mean) / spread")
    assert origin["inputs"][1]["zeros"] == 1 and origin["outputs"][0]["nan"] == 12  # the flat patch
    assert problem["skipped_updates"] == 0 and "update was skipped" not in run.stderr
    fix = problem["fixes"][0]
    assert fix["family"] == "safe_div"
    _patch_holds(fix, name, folder, tmp_path)
    assert "epoch 3 batch 5 loss" in _plain(tmp_path / "copy" / name, tmp_path / "copy")


def test_a_module_loop_that_breaks_on_a_nan_loss_is_diagnosed(torch_run):
    # The loop `break`s on a NaN loss (`not loss.item() < 1e4`, no test the doctor follows) and the
    # script ends cleanly (status 0): the loss it still holds in its globals is found,
    # its step replayed.
    name = "module_loop_breaks_on_nan.py"
    run, folder = torch_run(name, confirm="never")
    assert "loss is nan, stopping" in run.stdout
    assert run.exit_code == 1 and run.report["status"] == "problem"
    (problem,) = run.report["problems"]
    origin = problem["origin"]
    assert (problem["category"], problem["phase"], problem["step"]) == (
        "forward_overflow",
        "forward",
        1,
    )
    assert (origin["op"], origin["line"]) == (
        "exp",
        line_of(f"{SCRIPTS}/{name}", "probs = torch.exp(scores) / torch.exp(scores).sum("),
    )
    assert origin["inputs"][0]["max"] > 88.72 and origin["outputs"][0]["inf"] > 0


def test_anomaly_mode_is_left_to_the_doctor_which_names_the_root_and_its_fix(torch_run, tmp_path):
    # Turned on, anomaly mode stops the run inside backward(), before the update the
    # doctor checks. Left off (said so), the doctor names the root's backward.
    name = "anomaly_mode_pair_spread.py"
    run, folder = torch_run(name, confirm="never")
    assert run.exit_code == 1, run.stderr[-3000:]
    assert "anomaly detection is left off while the doctor watches" in run.stderr
    assert "returned nan values" not in run.stderr
    (problem,) = run.report["problems"]
    origin = problem["origin"]
    assert (problem["category"], problem["phase"], problem["step"]) == (
        "backward_singularity",
        "backward",
        3,  # the constant block's batch
    )
    assert origin["gradient_of"] == "sqrt"
    assert origin["line"] == line_of(f"{SCRIPTS}/{name}", "spread = torch.sqrt(centred.pow(2)")
    fix = problem["fixes"][0]
    assert fix["family"] == "safe_sqrt"
    _patch_holds(fix, name, folder, tmp_path)


def test_a_loop_that_skips_nonfinite_batches_is_stopped_at_its_own_test(torch_run, tmp_path):
    # `if torch.isnan(loss): continue` skips the batch and trains on: without the doctor
    # the run ends with no error. Its own test finding the loss NaN is the failing step.
    name = "skips_nonfinite_batches.py"
    run, folder = torch_run(name, confirm="never")
    assert "skipped 1" in _plain(folder / name, folder)  # the run the author sees
    assert run.exit_code == 1 and run.report["status"] == "problem"
    test_line = line_of(f"{SCRIPTS}/{name}", "if torch.isnan(loss):")
    assert f"stopped at your own finiteness test, {name}:{test_line}" in run.stderr
    (problem,) = run.report["problems"]
    origin = problem["origin"]
    assert (problem["category"], problem["phase"], problem["step"], origin["op"]) == (
        "forward_domain",
        "forward",
        4,  # the fifth batch: the all-zero rows
        "div",
    )
    assert origin["layer"] == "Regressor"
    assert origin["line"] == line_of(f"{SCRIPTS}/{name}", "return self.body(features / norms)")
    fix = problem["fixes"][0]
    _patch_holds(fix, name, folder, tmp_path)
    assert "skipped 0" in _plain(tmp_path / "copy" / name, tmp_path / "copy")


def test_a_function_loop_that_stops_on_numpys_test_of_the_loss_item_is_diagnosed(
    torch_run, tmp_path
):
    # `if np.isnan(loss.item()): break` in a function, gradients zeroed before the
    # forward: the failing step is found at the script's own test, and no parameter is
    # said to lack a gradient (no backward() of that step ran).
    name = "poisson_stops_on_np_isnan.py"
    run, folder = torch_run(name, confirm="never")
    test_line = line_of(f"{SCRIPTS}/{name}", "if np.isnan(loss.item()):")
    assert f"stopped at your own finiteness test, {name}:{test_line}" in run.stderr
    (problem,) = run.report["problems"]
    origin = problem["origin"]
    assert (problem["category"], problem["phase"], problem["step"], origin["op"]) == (
        "forward_domain",
        "forward",
        6,
        "log",
    )
    code = "return (rate - counts * torch.log(rate)).mean()"
    assert origin["line"] == line_of(f"{SCRIPTS}/{name}", code)
    assert origin["inputs"][0]["min"] < 0
    fix = problem["fixes"][0]
    assert fix["family"] == "safe_log"
    _patch_holds(fix, name, folder, tmp_path)


def test_a_compiled_models_division_is_named_in_the_model_it_wraps_and_its_patch_holds(
    torch_run, tmp_path
):
    # The sampled steps' global forward hooks would be traced into the compiled graph
    # (TorchDynamo failed on them): once the script compiles, forwards are not hooked.
    name = "compiled_model_unit_norm.py"
    run, folder = torch_run(name, confirm="never")
    assert run.exit_code == 1, run.stderr[-3000:]
    assert "Traceback" not in run.stderr and "_orig_mod" not in run.stdout
    (problem,) = run.report["problems"]
    origin = problem["origin"]
    assert (problem["category"], problem["phase"], problem["step"]) == (
        "forward_domain",
        "forward",
        4,  # the fifth batch: the all-zero rows
    )
    assert (origin["op"], origin["layer"]) == ("div", "UnitNormRegressor")
    code = "return self.body(x / x.norm(dim=1, keepdim=True))"
    assert origin["line"] == line_of(f"{SCRIPTS}/{name}", code)
    fix = problem["fixes"][0]
    assert fix["family"] == "safe_div"
    _patch_holds(fix, name, folder, tmp_path)


def test_a_batch_of_padding_alone_is_named_at_the_loss_and_its_counted_mean_holds(
    torch_run, tmp_path
):
    # Every label of one batch is the ignored -100: cross_entropy's mean is 0 / 0.
    name = "tagger_padding_only_batch.py"
    run, folder = torch_run(name, confirm="never")
    (problem,) = run.report["problems"]
    origin = problem["origin"]
    assert (problem["category"], problem["phase"], problem["step"], origin["op"]) == (
        "forward_domain",
        "forward",
        5,  # the sixth batch: the blank lines
        "nll_loss_forward",
    )
    code = "loss = F.cross_entropy(logits.view(-1, TAGS), tags.view(-1), ignore_index=PAD)"
    assert origin["line"] == line_of(f"{SCRIPTS}/{name}", code)
    assert "every one of this batch's 8 targets was -100" in problem["explanation"]
    assert {n["remedy"] for n in problem["not_fixes"] if n["structural"]} >= {"lower_learning_rate"}
    fix = problem["fixes"][0]
    assert (
        fix["family"] == "safe_div"
        and "(tags.view(-1) != PAD).sum().clamp(min=1)" in (fix["patch"])
    )
    _patch_holds(fix, name, folder, tmp_path)


def test_a_softmax_handed_to_cross_entropy_is_named_and_its_removal_learns_more(
    torch_run, tmp_path
):
    name = "softmax_head_cross_entropy.py"
    run, folder = torch_run(name, confirm="auto")
    assert run.exit_code == 1, run.stderr[-3000:]
    (problem,) = run.report["problems"]
    assert problem["category"] == "probabilities_as_logits", problem["explanation"]
    assert (problem["step"], problem["origin"]) == (0, None)
    softmax = line_of(f"{SCRIPTS}/{name}", "return F.softmax(")
    assert f"the output of a softmax at {name}:{softmax}" in problem["explanation"]
    (fix,) = problem["fixes"]
    assert fix["family"] == "from_logits"
    assert "+        return self.body(x)" in fix["patch"]
    assert fix["verified"] is True and "averaging" in fix["evidence"], fix["evidence"]
    _patch_holds(fix, name, folder, tmp_path)


def test_raw_scores_handed_to_nll_loss_get_its_module_made_cross_entropy(torch_run):
    name = "nll_of_raw_scores.py"
    run, _ = torch_run(name, confirm="never")
    assert run.exit_code == 1, run.stderr[-3000:]
    (problem,) = run.report["problems"]
    assert problem["category"] == "logits_as_probabilities", problem["explanation"]
    assert "`nll_loss` reads its input as log-probabilities" in problem["explanation"]
    (fix,) = problem["fixes"]
    assert "-criterion = nn.NLLLoss()" in fix["patch"]
    assert "+criterion = nn.CrossEntropyLoss()" in fix["patch"]


def test_nan_a_hand_written_optimizer_wrote_from_finite_gradients_is_its_updates(torch_run):
    # Before: "ReadVariableOp ... wrote NaN from finite inputs ... the data itself carries
    # this value", with a clamp of the input and standardised features as its fixes.
    name = "own_adagrad_zero_sum.py"
    run, _ = torch_run(name, confirm="never")
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["step"]) == ("optimizer_overflow", 0)
    assert "The NaN that step 1 read in `emb.weight`" in problem["explanation"]
    assert "its PlainAdagrad update wrote them" in problem["explanation"]
    origin = problem["origin"]
    assert (origin["source_kind"], origin["variable"]) == ("optimizer_creation", "emb.weight")
    assert origin["line"] == line_of(f"{SCRIPTS}/{name}", "opt = PlainAdagrad(")
    first = problem["fixes"][0]
    step_line = line_of(f"{SCRIPTS}/{name}", "def step(self")
    assert first["family"] == "safe_div"
    assert f"your PlainAdagrad.step ({name}:{step_line})" in first["title"]
    assert "weights were already NaN or Inf when it began" in run.stderr


def test_an_optimizer_of_a_model_built_again_is_named_with_the_parameters_it_misses(torch_run):
    # Before: "The step never reads these variables: their layer is built but not called
    # in the forward pass", with "stop training it" as the fix.
    name = "model_built_again.py"
    run, _ = torch_run(name, confirm="never")
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["step"]) == ("disconnected_gradients", 0)
    assert problem["disconnected"]["all"] is True
    text = problem["explanation"]
    assert "the loss's gradients went to 4 other parameters (`0.weight`, `0.bias`" in text
    optimizer = line_of(f"{SCRIPTS}/{name}", "optimizer = torch.optim.Adam(")
    assert f"The optimizer ({name}:{optimizer} `optimizer = torch.optim.Adam(" in text
    (fix,) = problem["fixes"]
    assert fix["family"] == "rebuild_optimizer"
    assert {item["remedy"] for item in problem["not_fixes"]} <= {
        "zero_grad_to_zeros",
        "detect_anomaly",
    }
    assert "running your script again" not in run.stderr  # no rerun was needed


def test_a_product_that_underflowed_to_zero_is_named_under_the_log_of_plain_tensors(tmp_path):
    # The parameters are tensors an optimizer trains, held by no module: weights all the
    # same (was: "Its input comes from the batch alone"), from the first step on.
    name = "bernoulli_product_likelihood.py"
    shutil.copy(ROOT / SCRIPTS / name, tmp_path / name)
    run = run_doctor(name, tmp=tmp_path, options=("--trial-steps", "0"), cwd=tmp_path)
    assert run.exit_code == 1, run.stderr[-3000:]
    problem = run.problem
    assert (problem["category"], problem["step"], problem["origin"]["op"]) == (
        "forward_domain",
        0,
        "log",
    )
    text = problem["explanation"]
    assert "batch alone" not in text
    prod = line_of(f"{SCRIPTS}/{name}", "torch.prod(per_feature, dim=2)")
    assert f"Those zeros began at Prod ({name}:{prod}), which wrote exact zeros" in text
    assert problem["fixes"][0]["family"] == "log_space"
    why = {item["remedy"]: item["why"] for item in problem["not_fixes"]}
    assert "No trainable weight lies" not in why.get("lower_learning_rate", "")


def test_a_loop_whose_except_exception_skips_bad_batches_does_not_swallow_the_stop(torch_run):
    # The stop was an Exception: the handler swallowed it in the run (the script went on)
    # and in the seeded rerun (which never ended the update it was to record).
    name = "batch_errors_skipped_by_except.py"
    run, _ = torch_run(name, confirm="never")
    assert run.exit_code == 1, run.stderr[-3000:]
    assert "skipped a batch" not in run.stdout
    problem = run.problem
    assert (problem["category"], problem["step"], problem["origin"]["op"]) == (
        "forward_domain",
        0,
        "sqrt",
    )
    assert problem["origin"]["line"] == line_of(f"{SCRIPTS}/{name}", "torch.sqrt(model(batch)")


def test_the_reruns_copy_the_folder_as_the_run_started_from_it(torch_run):
    # The run wrote checkpoint.pt; a copy holding it would resume at epoch 1, with the
    # rate it restores (a lower rate's patch then changes nothing), and fail at step 8.
    run, folder = torch_run("resumes_from_checkpoint.py")
    assert (folder / "checkpoint.pt").exists()  # the run's own, left as it wrote it
    problem = run.problem
    assert (problem["category"], problem["step"]) == ("forward_domain", 24)
    assert "the unchanged copy, run from the start, found forward_domain at step 24" in (run.stderr)
    lower = next(f for f in problem["fixes"] if f["family"] == "lower_learning_rate")
    assert lower["verified"] is True, lower["evidence"]
    assert "trained 96 steps from the start, to the end of your script" in lower["evidence"]
