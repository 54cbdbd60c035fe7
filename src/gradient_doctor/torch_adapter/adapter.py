"""`TorchAdapter`: PyTorch's answers to the neutral pipeline (replay, setup, source filter)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from gradient_doctor.core.evidence import Evidence, StaleGradients, StepHistory, TrainingSetup
from gradient_doctor.core.findings import Finding, Origin
from gradient_doctor.core.fix_placement import FixSites
from gradient_doctor.core.origin_search import trace_evidence
from gradient_doctor.core.pipeline import Adapter, Localized, Session, StepReading
from gradient_doctor.core.records import LayerRecord, StepRecord
from gradient_doctor.core.report import Report
from gradient_doctor.torch_adapter.hooks.backward_roots import backward_roots
from gradient_doctor.torch_adapter.hooks.optimizer_sites import OptimizerSites
from gradient_doctor.torch_adapter.hooks.script_hooks import ManualUpdate
from gradient_doctor.torch_adapter.hooks.warning_lines import WarningLines
from gradient_doctor.torch_adapter.localize import dataset_scan, source_lines
from gradient_doctor.torch_adapter.localize.gradient_paths import (
    PathRecorder,
    find_path_breaks,
    trainable_count,
)
from gradient_doctor.torch_adapter.localize.module_scope import (
    ModuleScope,
    module_names,
    parameter_names,
)
from gradient_doctor.torch_adapter.localize.op_recorder import (
    READ_VARIABLE,
    OpRecorder,
    parameter_values,
)
from gradient_doctor.torch_adapter.localize.reductions import TorchReductions
from gradient_doctor.torch_adapter.localize.update_writes import written_by_an_update
from gradient_doctor.torch_adapter.step import rng_state
from gradient_doctor.torch_adapter.step.gradient_resets import GradientResets
from gradient_doctor.torch_adapter.step.guarded_step import StepGuard
from gradient_doctor.torch_adapter.step.module_stats import ModuleStats
from gradient_doctor.torch_adapter.step.step_check import SquareOverflow
from gradient_doctor.torch_adapter.trials.fix_trials import TorchTrials

# The name reports give this framework (`Report.framework`).
FRAMEWORK = "torch"


@dataclass(frozen=True)
class FailedCall:
    """A call of the user's step whose update was skipped, as it can run again.

    Attributes:
        function: the user's step function.
        args, kwargs: what it was called with (by reference).
        rng: the random generators' state before the call.
        squares_overflow: when its gradients were finite but one's square overflows
            (`SquareOverflow`), that one: no op of the step went non-finite to replay.
    """

    function: Callable
    args: tuple
    kwargs: dict
    rng: rng_state.RngState
    squares_overflow: SquareOverflow | None = None


class PyTorchAdapter(Adapter):
    """What both PyTorch adapters answer alike, from `self.optimizers` (the optimizers
    whose updates are guarded), `self.session` (the run's `Session`), `self.stats` (the
    per-module statistics) and `self.sites` (the lines that built and stepped each
    optimizer, when they were watched)."""

    optimizers: Sequence[torch.optim.Optimizer]
    session: Session
    stats: ModuleStats
    sites: OptimizerSites | None = None
    # Steps in a row, up to the last, whose every gradient was exactly zero.
    _zero_steps: int = 0

    def with_pipeline(self, evidence: Evidence) -> Evidence:
        """For non-finite values the batch held, the user's Dataset whose `__getitem__`
        wrote them, when one in reach does (`dataset_scan`)."""
        if not evidence.bad_inputs or evidence.broken_state is not None:
            return evidence
        origin, item = dataset_scan.pipeline_origin(dataset_scan.datasets_in_reach())
        return replace(evidence, pipeline=origin, bad_item=item)

    def record_stale(self, stale: StaleGradients) -> None:
        """Record an optimizer's gradients, proved not reset between its updates
        (`GradientResets`), as a problem at this step."""
        setup = self.training_setup()
        history = self.session.step_history()
        step = self.session.steps_watched
        self.session.record(
            Evidence(step, None, None, history=history, setup=setup, stale_gradients=stale)
        )

    def zero_streak(self, grad_norm: float | None, failed: bool) -> int:
        """Count a step whose global gradient norm was exactly zero (every gradient of
        every update zero: nothing moved), and return the steps in a row so far."""
        zero = not failed and grad_norm == 0.0
        self._zero_steps = self._zero_steps + 1 if zero else 0
        return self._zero_steps

    def zero_gradients(self, window: int) -> tuple[str, ...]:
        """Every parameter the optimizers hold a gradient for, by name, when the last
        `window` steps' gradients were all exactly zero (the streak counts afresh)."""
        if self._zero_steps < window:
            return ()
        self._zero_steps = 0
        names = parameter_names(self.stats.models, self.optimizers)
        return tuple(
            names[id(p)]
            for optimizer in self.optimizers
            for group in optimizer.param_groups
            for p in group["params"]
            if p.grad is not None and id(p) in names
        )

    def step_records(self, step: int, reading: StepReading) -> tuple[StepRecord, ...]:
        """The step's loss and gradient norm (each objective's loss, with several
        optimizers); on a sampled step also each module's gradient norm of every step
        since the last read, and its other statistics."""
        records = self.stats.records(step, reading.loss, reading.grad_norm)
        if not reading.objective_losses:  # one objective: the records as they are
            return records
        *earlier, record = records
        return (*earlier, replace(record, objective_losses=reading.objective_losses))

    def overflow_evidence(
        self, overflow: SquareOverflow, step: int, history: StepHistory, setup: TrainingSetup
    ) -> Evidence:
        """The evidence of an update whose gradients were finite but one of whose squares
        overflows: the parameter of that gradient, its module and values; no op to
        replay (every value of the step was finite)."""
        names = parameter_names(self.stats.models, self.optimizers)
        parameter = next(
            (
                p
                for optimizer in self.optimizers
                for group in optimizer.param_groups
                for p in group["params"]
                if p.grad is overflow.gradient
            ),
            None,
        )
        name = names.get(id(parameter)) if parameter is not None else None
        origin = Origin(
            op="Square",
            op_name=f"{name or 'gradient'} ** 2",
            layer=(name.rpartition(".")[0] or None) if name else None,
            source=None,
            gradient_of=None,
            inputs=(overflow.stats,),
            outputs=(),
            variable=name,
        )
        return Evidence(
            step, None, origin, history=history, setup=setup, overflowed_norm=overflow.largest
        )

    def layer_records(self) -> tuple[LayerRecord, ...] | None:
        """The last sampled step's module statistics."""
        return self.stats.latest

    def fix_sites(self, evidence: Evidence) -> FixSites:
        """The failing update's optimizer, with the lines that built and stepped it; no
        site when the optimizer was built before the doctor watched (`watch()`)."""
        optimizer = self.failing_optimizer()
        if isinstance(optimizer, ManualUpdate):
            return FixSites(own_update=optimizer.backward_line)
        if self.sites is None or optimizer is None:
            return FixSites()
        return FixSites(optimizer=self.sites.site(optimizer))

    def failing_optimizer(self) -> torch.optim.Optimizer | None:
        """The optimizer whose update failed last; the first one unless told."""
        return self.optimizers[0] if self.optimizers else None

    def training_setup(self) -> TrainingSetup:
        return training_setup_of(self.optimizers)

    def is_user_file(self, filename: str) -> bool:
        return source_lines.is_user_file(filename)

    def objectives(self) -> int:
        return max(len(self.optimizers), 1)

    def report(self, script: str | None = None, script_error: str | None = None) -> Report:
        """The session's report, saying it came from PyTorch and how many optimizers
        stepped."""
        report = self.session.report(script, script_error)
        return replace(
            report,
            framework=FRAMEWORK,
            optimizers=self.optimizers_stepped(),
            scaler_skipped=self.scaler_skipped(),
        )

    def optimizers_stepped(self) -> int:
        """How many optimizers stepped in the run."""
        return len(self.optimizers)

    def scaler_skipped(self) -> int:
        """Updates a GradScaler skipped itself (seen by the script hooks only: a guarded
        optimizer's `step` is never called for them)."""
        return 0


class TorchAdapter(PyTorchAdapter):
    """The PyTorch side of one watched run; it owns the run's `Session`.

    Args:
        optimizers: the optimizers whose updates are guarded.
        models: the modules trained (their paths name each op's module; their
            buffers are put back after a replay). May be empty.
        **session: passed to `Session` (stop_on_problem, on_finding, trial_steps, ...).
    """

    def __init__(
        self,
        optimizers: Sequence[torch.optim.Optimizer],
        models: Sequence[torch.nn.Module] = (),
        **session,
    ) -> None:
        self.optimizers = tuple(optimizers)
        self.models = tuple(models)
        self.stats = ModuleStats(
            lambda: self.optimizers,
            self.models,
            on_loss_input=lambda found: self.session.loss_input_seen(found),
        )
        self.resets = GradientResets()  # `.grad` reset between each optimizer's updates
        self.guard = StepGuard(self.optimizers, self.stats, self._applied)
        self.warning_lines = WarningLines()  # torch's warnings at the user's line
        self.session = Session(self, **session)

    def install(self) -> None:
        self.guard.install()
        self.resets.install()
        self.warning_lines.install()

    def uninstall(self) -> None:
        self.guard.uninstall()
        self.resets.uninstall()
        self.warning_lines.uninstall()
        self.stats.close()

    def _applied(self, optimizer: torch.optim.Optimizer, params: list[torch.Tensor]) -> None:
        """An update was applied: were its gradients reset since the optimizer's last?"""
        stale = self.resets.observe(optimizer, params)
        if stale is not None:
            self.record_stale(stale)

    def begin_call(self) -> None:
        """Before a call of the step: sample its forward when it is a sampled step."""
        if self.stats.samples(self.session.steps_watched):
            self.stats.begin_sample()

    def localize(
        self, replay: FailedCall, step: int, history: StepHistory, setup: TrainingSetup
    ) -> Localized:
        """Run the failing call again from the last good weights, with its random draws,
        under the op recorder, its update suppressed; walk the ops to the origin. A call
        whose values were all finite, but a gradient's square overflows, has nothing to
        replay: its evidence is that gradient's."""
        if replay.squares_overflow is not None:
            evidence = self.overflow_evidence(replay.squares_overflow, step, history, setup)
            return Localized(evidence, rerun=replay)
        scope = ModuleScope(module_names(self.models))
        recorder = OpRecorder(scope, parameter_names(self.models, self.optimizers))
        data_ids = recorder.keys((replay.args, replay.kwargs))
        self._replay(replay, recorder, scope)
        traced = trace_evidence(
            recorder.events,
            recorder.bad_ids,
            step,
            data_ids=data_ids,
            weight_reads=frozenset({READ_VARIABLE}),
            stats=recorder.stats,
            reductions=TorchReductions(),
            variable_values=parameter_values(recorder.events),
        )
        evidence = replace(
            traced.evidence, history=history, setup=setup, reproduced=bool(recorder.bad_ids)
        )
        written = written_by_an_update(evidence, self.optimizers, self.sites)
        if written is not evidence:  # the update before wrote it: no trial of this call helps
            return Localized(written, rerun=None)
        evidence = self.with_pipeline(evidence)
        return Localized(evidence, rerun=replay)

    def disconnected(
        self,
        call: FailedCall,
        cuts: Sequence[tuple[torch.optim.Optimizer, list[torch.Tensor], int]],
    ) -> None:
        """Record where the paths to parameters left without a gradient break (each
        group once): the call run again under the path recorder (`gradient_paths`)."""
        names = parameter_names(self.models, self.optimizers)
        cuts = [
            (optimizer, cut)
            for optimizer, cut, _ in cuts
            if self.session.disconnected_first_seen(names[id(p)] for p in cut)
        ]
        if not cuts:
            return
        scope = ModuleScope(module_names(self.models))
        recorder = PathRecorder(scope, names)
        try:
            with recorder.exits_noted():
                updates = self._replay(call, recorder, scope)
            for optimizer, cut in cuts:
                losses = [loss for opt, asked in updates if opt is optimizer for loss in asked]
                breaks = find_path_breaks(recorder, cut, losses)
                self.session.record_path_breaks(breaks, len(cut) == trainable_count(optimizer))
        except Exception as error:  # never let the doctor's analysis break the user's run
            warnings.warn(
                "gradient-doctor could not trace where the gradients of "
                f"{sum(len(cut) for _, cut in cuts)} parameters are lost "
                f"({type(error).__name__}: {error}).",
                stacklevel=3,
            )

    def _replay(self, call: FailedCall, recorder: OpRecorder, scope: ModuleScope) -> list:
        """Run `call` again under `recorder`, with its random draws, its updates
        suppressed; the RNG, the models' buffers and the gradients are put back after.

        Returns:
            The (optimizer, losses) of each update the call asked for.
        """
        after, buffers, grads = rng_state.save(), self._buffers(), self._grads()
        rng_state.restore(call.rng)
        try:
            with backward_roots(), scope.hooked(), self.guard.replaying(recorder), recorder:
                call.function(*call.args, **call.kwargs)
            return list(self.guard.replayed)
        finally:
            rng_state.restore(after)
            self._put_back(buffers)
            for parameter, grad in grads:
                parameter.grad = grad

    def fix_trials(
        self, finding: Finding, evidence: Evidence, rerun: FailedCall
    ) -> TorchTrials | None:
        """The finding's fixes as trials of the failing call, from the last good state;
        None for values the user's Dataset made (the call's trial would read the same
        batch: a rerun of the patched copy from the start judges those fixes)."""
        if evidence.pipeline is not None:
            return None
        return TorchTrials(finding, evidence, rerun, self.guard, self.models)

    def resume(self) -> None:
        self.guard.resume()

    def _buffers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Copies of the models' buffers (a batch norm's running statistics)."""
        with torch.no_grad():
            return [(b, b.clone()) for model in self.models for b in model.buffers()]

    def _grads(self) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """The optimizers' parameters with copies of their gradients (a replay's
        `backward()` adds into them, its `zero_grad()` may clear them in place)."""
        with torch.no_grad():
            return [
                (p, None if p.grad is None else p.grad.clone())
                for optimizer in self.optimizers
                for group in optimizer.param_groups
                for p in group["params"]
            ]

    @staticmethod
    def _put_back(buffers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        with torch.no_grad():
            for buffer, saved in buffers:
                buffer.copy_(saved)


def training_setup_of(optimizers: Sequence[torch.optim.Optimizer]) -> TrainingSetup:
    """The first optimizer's class and learning rate (clipping is the user's own call in
    PyTorch), the remedies spelled in PyTorch."""
    if not optimizers:
        return TrainingSetup(framework="torch")
    if isinstance(optimizers[0], ManualUpdate):
        return TrainingSetup(framework="torch", own_update=True)
    kind = type(optimizers[0]).__name__
    rate = optimizers[0].param_groups[0].get("lr")
    try:
        return TrainingSetup(learning_rate=float(rate), framework="torch", optimizer=kind)
    except (TypeError, ValueError):
        return TrainingSetup(framework="torch", optimizer=kind)
