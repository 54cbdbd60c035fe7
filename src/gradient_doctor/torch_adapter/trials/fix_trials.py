"""Run fix trials in PyTorch: the failing call again, from the last good state, with a remedy.

When the guard trips, the update is skipped, so the parameters and the optimizers'
state still hold the last good step. `open()` copies them (with the models' buffers,
the gradients, the param groups' settings, torch's random state and the guard's
own), and each trial starts from that copy with the random state the failing call
began with: it calls the user's step on the failing batch, again and again (the run's
later batches do not exist yet), with one remedy in place, and reads the guard after
each call. On exit the copy is put back, so the user's run goes on (or stops) exactly
as it would have. State the step keeps elsewhere (a counter of the user's, a
scheduler's epoch) is not copied.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext

import torch

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Finding, Fix
from gradient_doctor.core.fix_trials import TrialOutcome
from gradient_doctor.core.patched_source import PatchedSource, reached_in_python
from gradient_doctor.core.trial_plans import NotTried, TrialPlan
from gradient_doctor.core.trial_start import TrialStart
from gradient_doctor.torch_adapter.hooks.backward_roots import backward_roots
from gradient_doctor.torch_adapter.step import rng_state
from gradient_doctor.torch_adapter.step.guarded_step import StepGuard
from gradient_doctor.torch_adapter.trials.trial_plans import plan_for, trial_plans


class TorchTrials:
    """The trials of one finding's fixes in PyTorch (the adapter's `FixTrials` and, once
    opened, its `TrialRunner`).

    Args:
        finding: the diagnosed problem, its fixes placed.
        evidence: its evidence.
        call: the failing call (`adapter.FailedCall`: the step, its batch, its random state).
        guard: the run's guard, read after each trial step.
        models: the modules trained (their buffers are copied too).
    """

    def __init__(
        self,
        finding: Finding,
        evidence: Evidence,
        call,
        guard: StepGuard,
        models: Sequence[torch.nn.Module] = (),
    ) -> None:
        self.plans = trial_plans(finding, evidence, guard.optimizers)
        self._planned = (evidence, guard.optimizers)
        self.untried = None
        self.saved_steps: list[int] = []  # no snapshot ring yet: the last good state only
        self._call = call
        self._guard = guard
        self._models = tuple(models)
        self._saved: SavedState | None = None

    def plan_for(self, remedy: str, fix: Fix) -> TrialPlan | None:
        """The plan that tries `remedy` as `fix` writes it (a fix's `stronger` one)."""
        return plan_for(remedy, fix, *self._planned)

    @contextmanager
    def open(self) -> Iterator[TorchTrials]:
        """Copy the run's state; put it back (random state and guard included) at the end."""
        saved = SavedState(self._guard.optimizers, self._models)
        guard = self._guard
        latch = guard.closed, guard.skipped, guard.updates, list(guard.checks)
        rng = rng_state.save()
        self._saved = saved
        try:
            yield self
        finally:
            self._saved = None
            saved.restore()
            rng_state.restore(rng)
            guard.closed, guard.skipped, guard.updates = latch[:3]
            guard.checks[:] = latch[3]

    def run(
        self, plan: TrialPlan | None, start: TrialStart, failing: int, beyond: int
    ) -> TrialOutcome:
        """One trial from the last good state: `beyond` calls on the failing batch, the
        first of them the failing call itself, with `plan` in place (None: the baseline)."""
        remedy = None if plan is None else plan.remedy
        setting = "" if plan is None else plan.setting
        steps = max(failing - start.step, 0) + beyond
        self._saved.restore()
        rng_state.restore(self._call.rng)
        self._guard.resume()
        try:
            with plan.apply() if plan is not None else nullcontext() as placed:
                return self._steps(remedy, setting, steps, placed)
        except NotTried as reason:
            return TrialOutcome(remedy, setting, steps, 0, None, skipped=str(reason))

    def _steps(self, remedy, setting: str, steps: int, placed) -> TrialOutcome:
        """Call the step `steps` times on the failing batch; stop at the first failure."""
        call, guard = self._call, self._guard
        losses: list[float] = []
        patched = isinstance(placed, PatchedSource)
        for index in range(steps):
            guard.begin_call()
            watch = reached_in_python(placed) if patched and index == 0 else nullcontext()
            with _quiet(), backward_roots(), watch:
                call.function(*call.args, **call.kwargs)
            if patched and index == 0 and not placed.met:
                raise NotTried("the patched code was not reached when the step ran")
            if not guard.checks:
                raise NotTried("the step asked for no update when it ran again")
            if guard.closed:
                return TrialOutcome(
                    remedy, setting, steps, index + 1, index, tuple(losses), _batches(index + 1)
                )
            if guard.call_loss is not None:
                losses.append(guard.call_loss)
        return TrialOutcome(remedy, setting, steps, steps, None, tuple(losses), _batches(steps))


def _batches(count: int) -> str:
    """The batches a trial ran on, in words."""
    return "the failing batch" + (f" ({count} times)" if count > 1 else "")


class SavedState:
    """A copy of what a step changes: parameters and their gradients, buffers, the
    optimizers' per-parameter state and their param groups' settings.

    Args:
        optimizers: the optimizers whose parameters and state are copied.
        models: modules whose parameters and buffers are copied too.
    """

    def __init__(
        self, optimizers: Sequence[torch.optim.Optimizer], models: Sequence[torch.nn.Module]
    ) -> None:
        self._optimizers = tuple(optimizers)
        tensors: dict[int, torch.Tensor] = {}
        for optimizer in optimizers:
            for group in optimizer.param_groups:
                for parameter in group["params"]:
                    tensors.setdefault(id(parameter), parameter)
        for model in models:
            for tensor in (*model.parameters(), *model.buffers()):
                tensors.setdefault(id(tensor), tensor)
        with torch.no_grad():
            self._tensors = [(t, t.detach().clone(), _cloned(t.grad)) for t in tensors.values()]
            self._state = [
                {p: {k: _cloned(v) for k, v in s.items()} for p, s in o.state.items()}
                for o in optimizers
            ]
        self._groups = [
            [{k: _cloned(v) for k, v in g.items() if k != "params"} for g in o.param_groups]
            for o in optimizers
        ]

    def restore(self) -> None:
        """Put every copied value back (a trial's own copies are never handed out)."""
        with torch.no_grad():
            for tensor, value, grad in self._tensors:
                tensor.copy_(value)
                if isinstance(tensor, torch.nn.Parameter) or tensor.requires_grad:
                    tensor.grad = _cloned(grad)
        for optimizer, state, groups in zip(self._optimizers, self._state, self._groups):
            optimizer.state.clear()
            for parameter, values in state.items():
                optimizer.state[parameter] = {k: _cloned(v) for k, v in values.items()}
            for group, settings in zip(optimizer.param_groups, groups):
                group.update({k: _cloned(v) for k, v in settings.items()})


def _cloned(value):
    """A tensor's copy (None and other values as they are)."""
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


@contextmanager
def _quiet() -> Iterator[None]:
    """Hide what the user's step prints while a trial runs it (it ran once already)."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield
