"""PyTorch fix trials: the patch runs as written from the last good state; a verified patch,
applied with `patch -p1` to a copy, trains past the failing step; one that does not help
is not verified; the run's own state comes back unchanged."""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
import subprocess

import pytest

torch = pytest.importorskip("torch")

import gradient_doctor.torch as doctor_torch  # noqa: E402
from gradient_doctor.core.findings import Edit  # noqa: E402
from gradient_doctor.core.patches import unified_diff  # noqa: E402
from gradient_doctor.core.pipeline import try_fixes  # noqa: E402
from gradient_doctor.torch_adapter.trials.fix_trials import TorchTrials  # noqa: E402
from tests.conftest import ROOT, line_of  # noqa: E402
from tests.scripts.torch import mlp_log_of_sigmoid, wgan_gp_padded_rows  # noqa: E402
from tests.torch_adapter.conftest import run_until_stopped  # noqa: E402

MLP = "tests/scripts/torch/mlp_log_of_sigmoid.py"
WGAN = "tests/scripts/torch/wgan_gp_padded_rows.py"
TRIAL_STEPS = 25


def _patched_copy(script: str, patch: str, tmp_path):
    """The script copied under `tmp_path` at its relative path, patched there with
    `patch -p1` as a user would, and imported as a module of its own."""
    copy = tmp_path / script
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / script, copy)
    subprocess.run(["patch", "-p1", "--quiet"], input=patch, text=True, cwd=tmp_path, check=True)
    spec = importlib.util.spec_from_file_location(f"patched_{copy.stem}", copy)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _losses_finite(step, batches) -> list[float]:
    """Run the unwatched `step` on each batch; the losses, all asserted finite."""
    losses = [float(step(*batch)) for batch in batches]
    assert all(torch.isfinite(torch.tensor(losses))), losses
    return losses


def test_the_log_guard_is_verified_and_applied_trains_past_the_failing_step(tmp_path):
    model, optimizer, step = mlp_log_of_sigmoid.build()
    watched = doctor_torch.watch(
        step, model=model, optimizer=optimizer, verbose=False, trial_steps=TRIAL_STEPS
    )
    finding, _ = run_until_stopped(watched, mlp_log_of_sigmoid.batches(60))
    assert finding.origin.source.line == line_of(MLP, "log_q = torch.log(1 - p)")
    (fix,) = [fix for fix in finding.fixes if fix.family == "safe_log"]
    assert fix.verified is True, fix.evidence
    assert f"all {TRIAL_STEPS} steps finite" in fix.evidence
    assert "unchanged, it failed again at trial step 1" in fix.evidence
    patched = _patched_copy(MLP, fix.patch, tmp_path)
    _, _, patched_step = patched.build()
    # Finite through the failing step and 5 past it; the head's other hand-written log,
    # `torch.log(p)`, reaches 0 for the other class some steps later
    # (test_fixes_spelled_in_torch.py follows the run there).
    _losses_finite(patched_step, patched.batches(finding.step + 6))


def test_the_hand_written_norms_epsilon_is_verified_and_applied_trains_on(tmp_path):
    trainer = wgan_gp_padded_rows.CriticTrainer()
    watched = doctor_torch.watch(
        trainer.step,
        model=trainer.critic,
        optimizer=trainer.optimizer,
        verbose=False,
        trial_steps=TRIAL_STEPS,
    )
    finding, _ = run_until_stopped(watched, wgan_gp_padded_rows.batches(epochs=2))
    assert finding.origin.source.line == line_of(WGAN, "norm = torch.sqrt((g**2).sum(dim=1))")
    (fix,) = [fix for fix in finding.fixes if fix.family == "safe_norm"]
    assert fix.verified is True, fix.evidence
    # The update remedies were tried too, and failed at the failing call itself.
    tried = {item.remedy: item.evidence for item in finding.not_fixes}
    assert "not finite again at trial step 1" in tried["lower_learning_rate"]
    assert "clip_grad_norm_" in tried["gradient_clipping"]
    patched = _patched_copy(WGAN, fix.patch, tmp_path)
    _losses_finite(patched.CriticTrainer().step, patched.batches(epochs=3))


def test_a_patch_of_the_other_log_does_not_help_and_is_not_verified():
    """The head's other log, `torch.log(p)`, guarded instead of the one the replay blamed:
    the trial runs that patch as written and fails at the failing call itself."""
    model, optimizer, step = mlp_log_of_sigmoid.build()
    watched = doctor_torch.watch(step, model=model, optimizer=optimizer, verbose=False)
    adapter = watched.adapter
    seen = []
    localize = adapter.localize
    adapter.localize = lambda *args: seen.append(localize(*args)) or seen[-1]
    adapter.session.trial_steps = 0  # the trials below run by hand
    finding, _ = run_until_stopped(watched, mlp_log_of_sigmoid.batches(60))
    (localized,) = seen
    before = [t.clone() for t in (*model.parameters(), *model.buffers())]
    momenta = [s["momentum_buffer"].clone() for s in optimizer.state.values()]
    rng = torch.get_rng_state()

    line = line_of(MLP, "log_p = torch.log(p)")
    old = (ROOT / MLP).read_text().splitlines()[line - 1]
    edit = Edit(MLP, line, line, (old.replace("torch.log(p)", "torch.log(p.clamp_min(1e-7))"),))
    wrong = dataclasses.replace(
        finding.fixes[0], family="safe_log", edits=(edit,), patch=unified_diff([edit])
    )
    others = tuple(fix for fix in finding.fixes if fix.family != "safe_log")
    finding = dataclasses.replace(finding, fixes=(wrong, *others), not_fixes=())
    trials = TorchTrials(finding, localized.evidence, localized.rerun, adapter.guard, [model])
    judged = try_fixes(finding, localized.evidence, trials, steps=TRIAL_STEPS)

    (tried,) = [fix for fix in judged.fixes if fix.family == "safe_log"]
    assert tried.verified is False
    assert "not finite again at trial step 1" in tried.evidence
    # The run's own state is what it was before the trials.
    after = [*model.parameters(), *model.buffers()]
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    assert all(
        torch.equal(a, s["momentum_buffer"]) for a, s in zip(momenta, optimizer.state.values())
    )
    assert torch.equal(rng, torch.get_rng_state())
    assert adapter.guard.closed
