"""The fixes for torch code are spelled in torch: each patch applies to the user's file, the
patched script runs, and trained from the start it stays finite past the failing step."""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")

import gradient_doctor.torch as doctor_torch  # noqa: E402
from gradient_doctor.core.patches import apply_unified_diff  # noqa: E402
from tests.conftest import ROOT  # noqa: E402
from tests.scripts.torch import (  # noqa: E402
    layer_norm_constant_rows,
    mlp_log_of_sigmoid,
    root_scale_exp,
    wgan_gp_padded_rows,
)
from tests.torch_adapter.conftest import first_nonfinite_step, run_until_stopped  # noqa: E402


def _patched(module, patch: str, tmp_path):
    """The script as the patch leaves it, imported as a module of its own."""
    (text,) = apply_unified_diff(patch, str(ROOT)).values()
    path = tmp_path / f"patched_{module.__name__.rpartition('.')[2]}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    patched = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(patched)
    return patched


def test_the_log_guards_are_torch_calls_that_hold_at_their_line(tmp_path):
    model, optimizer, step = mlp_log_of_sigmoid.build()
    watched = doctor_torch.watch(step, model=model, optimizer=optimizer, verbose=False)
    finding, _ = run_until_stopped(watched, mlp_log_of_sigmoid.batches(60))
    fixes = {fix.family: fix for fix in finding.fixes if fix.patch}
    assert {"safe_log", "clip_input_domain", "from_logits"} <= set(fixes)
    for fix in fixes.values():
        assert "tf." not in fix.patch
        exact = fix.family == "from_logits"  # the logits kept, the logs on them
        assert ("torch.nn.functional.logsigmoid" if exact else "torch.clamp") in fix.patch
        patched = _patched(mlp_log_of_sigmoid, fix.patch, tmp_path)
        patched_model, patched_optimizer, patched_step = patched.build()
        watched = doctor_torch.watch(
            patched_step, model=patched_model, optimizer=patched_optimizer, verbose=False
        )
        # Both hand-written logs of the head's probability are guarded in the one patch
        # (`torch.log(p)` reaches 0 next, for the other class, when left bare).
        assert "-        log_p = torch.log(p)" in fix.patch.splitlines(), fix.family
        later, calls = run_until_stopped(watched, patched.batches(60))
        assert calls > finding.step + 1, fix.family
        assert later is None, (fix.family, later.origin.source if later.origin else None)


def test_the_hand_written_norm_gets_an_epsilon_that_holds(tmp_path):
    trainer = wgan_gp_padded_rows.CriticTrainer()
    watched = doctor_torch.watch(
        trainer.step, model=trainer.critic, optimizer=trainer.optimizer, verbose=False
    )
    finding, _ = run_until_stopped(watched, wgan_gp_padded_rows.batches(epochs=2))
    (fix,) = [fix for fix in finding.fixes if fix.family == "safe_norm"]
    assert "tf." not in fix.patch
    patched = _patched(wgan_gp_padded_rows, fix.patch, tmp_path)
    fixed = patched.CriticTrainer()
    parameters = list(fixed.critic.parameters())
    assert first_nonfinite_step(fixed.step, patched.batches(epochs=3), parameters) is None


def test_a_division_written_as_an_operator_is_made_safe_in_torch(tmp_path):
    model, optimizer, step = layer_norm_constant_rows.build()
    watched = doctor_torch.watch(step, model=model, optimizer=optimizer, verbose=False)
    finding, _ = run_until_stopped(watched, layer_norm_constant_rows.batches(3))
    assert (finding.category, finding.origin.op, finding.step) == ("forward_domain", "RealDiv", 0)
    assert finding.origin.layer == "norm"
    (fix,) = [fix for fix in finding.fixes if fix.family == "safe_div"]
    assert "tf." not in fix.patch and "divide_no_nan" not in fix.code
    assert "+        return self.gain * torch.where(std == 0, 0.0, (x - mean) / torch.where(" in (
        fix.patch
    )
    patched = _patched(layer_norm_constant_rows, fix.patch, tmp_path)
    patched_model, patched_optimizer, patched_step = patched.build()
    parameters = list(patched_model.parameters())
    assert first_nonfinite_step(patched_step, patched.batches(20), parameters) is None


def test_a_parameter_of_the_root_module_is_bounded_by_its_name():
    model, optimizer, step = root_scale_exp.build()
    watched = doctor_torch.watch(step, model=model, optimizer=optimizer, verbose=False)
    finding, _ = run_until_stopped(watched, root_scale_exp.batches(6))
    assert finding is not None and finding.origin.op == "Exp"
    (bound,) = [fix for fix in finding.fixes if fix.family == "constrain_weights"]
    assert bound.title == "Bound the parameter `scale`, whose values feed exp"
    assert "model.scale.clamp_(-3.0, 3.0)" in bound.code
    assert "no patch" in bound.code and bound.patch is None
    assert "get_submodule" not in bound.code and "the layer" not in bound.code
    # the model itself runs: the code bounds the parameter the optimizer steps
    with torch.no_grad():
        eval(compile(bound.code.splitlines()[-1].split("#")[0].strip(), "fix", "eval"))
