"""Shared fixtures: quiet TensorFlow, and one CLI run per script shared by its tests."""

from __future__ import annotations

import ast
import fcntl
import json
import os
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SCRIPTS = Path(__file__).resolve().parent / "scripts"


@dataclass(frozen=True)
class DoctorRun:
    """One run of `gradient-doctor run` on a script."""

    exit_code: int
    report: dict | None
    stdout: str
    stderr: str

    @property
    def problem(self) -> dict:
        assert self.report is not None, self.stderr[-3000:]
        assert self.report["problems"], self.stderr[-3000:]
        return self.report["problems"][0]


def doctor_command() -> list[str]:
    """The installed `gradient-doctor` entry point (the real CLI)."""
    script = Path(sys.executable).parent / "gradient-doctor"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "gradient_doctor.cli.main"]


def run_doctor(
    script: Path | str, *args: str, tmp: Path, options: tuple = (), cwd: Path = ROOT
) -> DoctorRun:
    """Run the doctor on `script` from `cwd` (the repository root unless told), returning
    its report. A script outside the folder run from gets fixes without patches.

    Verified fixes are not rerun from the start (`--confirm never`) unless `options`
    say otherwise: each rerun costs a run of the script, and only the tests of the
    confirmation ask for it (`CONFIRMED_SCRIPTS`).
    """
    if "--confirm" not in options:
        options = (*options, "--confirm", "never")
    report_path = tmp / "report.json"
    completed = subprocess.run(
        [*doctor_command(), "run", "--report", str(report_path), *options, str(script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    return DoctorRun(completed.returncode, report, completed.stdout, completed.stderr)


def line_of(relative: str, text: str) -> int:
    """The 1-based number of the only code line of a repository file that contains `text`.

    The module docstring (where examples state what they expect) is not searched.
    """
    source = (ROOT / relative).read_text()
    body = ast.parse(source).body
    has_docstring = (
        body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    )
    after = body[0].end_lineno if has_docstring else 0
    lines = source.splitlines()
    matches = [
        number for number, line in enumerate(lines, start=1) if number > after and text in line
    ]
    assert len(matches) == 1, f"{text!r} is on lines {matches} of {relative}"
    return matches[0]


_MISSING = object()


@contextmanager
def patches_installed(patches):
    """`(owner, name, value)` patches set for the block, as `gradient-doctor run` sets
    them, and each attribute put back (or removed) after."""
    saved = [(owner, name, owner.__dict__.get(name, _MISSING)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in reversed(saved):
            if value is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


@contextmanager
def creation_recording():
    """The constructors that record creation lines installed for the block, as
    `gradient-doctor run` installs them (a test then needs no search of the source)."""
    from gradient_doctor.tf_adapter.hooks import creation_sites

    with patches_installed(creation_sites.recording_patches()):
        yield


_runs: dict[str, DoctorRun] = {}
# The scripts whose shared run also reruns each verified patch from the start (the tests
# of "verified means the patch holds" read its evidence); every other run skips it.
CONFIRMED_SCRIPTS = frozenset(
    {
        "examples/story3_exploding_gradients.py",
        "tests/scripts/bce_two_logs_one_line.py",
        "tests/scripts/unscaled_input_fit.py",
        "tests/scripts/unscaled_targets_fit.py",
        "tests/scripts/gan_two_tapes_noise.py",
        "tests/scripts/argparse_slow_explosion.py",
        "tests/scripts/exp_temperature_loop.py",
        "tests/scripts/dataset_loop_batch_std.py",
        "tests/scripts/inline_eager_log_domain.py",
        "tests/scripts/dense_unscaled_input.py",
        "tests/scripts/float16_mask_constant.py",
        "tests/scripts/vae_sampling_overflow.py",
        "tests/scripts/gaussian_nll_relu_variance.py",
        "tests/scripts/rnn_relu_growth.py",
        "tests/scripts/infonce_two_lines.py",
        "tests/scripts/zero_temperature_subclass_fit.py",
        "tests/scripts/torch/flow_scale_starts_at_zero.py",
        "tests/scripts/torch/noisy_labels_gathered_log.py",
        "tests/scripts/gan_two_step_functions.py",
        "tests/scripts/padded_tokens_layer_norm_no_epsilon.py",
        "tests/scripts/xla_sum_order.py",
        "tests/scripts/masked_mean_missing_labels.py",
        "tests/scripts/inline_eager_pair_distance.py",
        "tests/scripts/float16_adam_tape_loop.py",
        "tests/scripts/oscillator_noise_variance.py",
        "tests/scripts/pipeline_map_flat_windows.py",
        "tests/scripts/diverging_rnn_fit.py",
    }
)


@pytest.fixture(scope="session")
def doctor_run(tmp_path_factory):
    """Run (once per session) the doctor on a script path relative to the repository root.

    Under pytest-xdist (`make test` runs two workers) the workers share each run: the
    first to ask for a script runs it, holding a lock on it, and the others read its
    result, so a story two test files read is still trained once.
    """

    def get(relative: str) -> DoctorRun:
        if relative not in _runs:
            _runs[relative] = _shared_run(relative, tmp_path_factory)
        return _runs[relative]

    return get


def _shared_run(relative: str, tmp_path_factory) -> DoctorRun:
    """The run of `relative`, made by this worker or read from the one that made it."""

    def run() -> DoctorRun:
        tmp = tmp_path_factory.mktemp(Path(relative).stem)
        confirm = "always" if relative in CONFIRMED_SCRIPTS else "never"
        return run_doctor(relative, tmp=tmp, options=("--confirm", confirm))

    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return run()
    shared = tmp_path_factory.getbasetemp().parent / "shared_doctor_runs"  # all workers'
    shared.mkdir(exist_ok=True)
    key = relative.replace("/", "__")
    with open(shared / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        result = shared / f"{key}.json"
        if result.exists():
            return DoctorRun(**json.loads(result.read_text()))
        made = run()
        result.write_text(json.dumps(asdict(made)))
        return made


@pytest.fixture(autouse=True)
def no_graph_compiled_before():
    """Each test starts as a fresh process would: with no TorchDynamo graph counted as
    compiled (once one is, the doctor stops hooking PyTorch forwards for the rest of the
    process, `module_stats._compiled_anything`; a graph another test compiled in the same
    worker must not do that)."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    if dynamo is not None:
        dynamo.counters.clear()
    yield
