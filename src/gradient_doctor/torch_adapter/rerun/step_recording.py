"""In the seeded rerun: the failing step's ops recorded, from the step before to its update.

The rerun runs the user's script again under the same update hooks as the run (so it
skips the same updates and follows the same trajectory). After update `window_after`
(or from the start, for -1) every aten op runs under the op recorder, with the module
scope followed; updates inside the window (a GAN's other optimizer, stepping first)
are applied unrecorded. At the pre-hook of update `failing` the check's loss and
gradients are marked, the events written, and the script stopped (`StepRecorded`).
A step recorded for the parameters its update left without a gradient (`paths`) runs
under the `PathRecorder` instead, and hands back what the path search needs
(`step_events.CutPaths`): those parameters by name and the update's loss.

The models are not handed over as in `watch(model=...)`: every module whose `forward`
is called while no other module runs is a root, and those that hold parameters are
named as `module_names` names models (the few roots first called inside the window
are named when first seen, without a root prefix while they are the only one).
"""

from __future__ import annotations

import contextlib
import os

import torch
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)

from gradient_doctor.cli.script_runner import ScriptEnd
from gradient_doctor.errors import TrainingStopped
from gradient_doctor.torch_adapter.dump.step_tape import TapedRecorder
from gradient_doctor.torch_adapter.dump.tape_files import TAPE_ERROR, write_tape
from gradient_doctor.torch_adapter.hooks.anomaly_mode import AnomalyModeLeftOff
from gradient_doctor.torch_adapter.hooks.optimizer_sites import OptimizerSites
from gradient_doctor.torch_adapter.hooks.script_hooks import Update, UpdateHooks, UpdateListener
from gradient_doctor.torch_adapter.localize.gradient_paths import PathRecorder, missing_gradients
from gradient_doctor.torch_adapter.localize.module_scope import (
    ModuleScope,
    module_names,
    parameter_names,
    script_tensor_names,
)
from gradient_doctor.torch_adapter.localize.op_recorder import OpRecorder
from gradient_doctor.torch_adapter.rerun import step_events
from gradient_doctor.torch_adapter.rerun.step_events import CutPaths, RecordedStep
from gradient_doctor.torch_adapter.step.step_check import dense_grads

# `window_after` for a failing step that is the run's first: record from the start.
FROM_START = -1


class StepRecorded(TrainingStopped):
    """The failing update was reached and its step recorded: the rerun stops here."""

    def __init__(self, update: int) -> None:
        self.finding = None
        BaseException.__init__(self, f"gradient-doctor recorded the step of update {update}")


class StepRecording(UpdateListener):
    """Records the step that ends at update `failing` into `out` (`step_events` JSON).

    Args:
        window_after: the update after which the step began (`FROM_START` for the first).
        failing: the failing update's index.
        out: the JSON file written.
        paths: record where the paths to the update's parameters without a gradient
            break, rather than its non-finite values.
        tape: a folder to write the step's tape to, for `--dump` (the ops under the
            `TapedRecorder`, `tape_files`), or None.
    """

    def __init__(
        self,
        window_after: int,
        failing: int,
        out: str,
        paths: bool = False,
        tape: str | None = None,
    ) -> None:
        self.window_after = window_after
        self.failing = failing
        self.out = out
        self.paths = paths
        self.tape = tape
        self.hooks = UpdateHooks(self)
        self.anomaly_mode = AnomalyModeLeftOff()  # as in the run (`ScriptAdapter`)
        self.recorder: OpRecorder | None = None
        self._roots: list[torch.nn.Module] = []  # modules first called at depth 0
        self._depth = 0
        self._optimizers: list[torch.optim.Optimizer] = []
        # Each optimizer as the script builds it: the tensors it trains that no module
        # holds are the step's weights before its first `step()` (`_optimizer_built`).
        self._sites = OptimizerSites(on_built=self._optimizer_built)
        self._module_names: dict[int, str] = {}
        self._parameters: dict[int, str] = {}
        self._window = contextlib.ExitStack()
        self._paused = contextlib.ExitStack()
        self._handles: list = []

    def install(self) -> None:
        """The update hooks and the search for root modules; the window opens now for a
        failing first step."""
        self.anomaly_mode.install()
        self._sites.install()
        self.hooks.install()
        self._handles = [
            register_module_forward_pre_hook(self._entered),
            register_module_forward_hook(self._left, always_call=True),
        ]
        if self.window_after == FROM_START:
            self._open()

    def uninstall(self) -> None:
        self._window.close()
        for handle in self._handles:
            handle.remove()
        self.hooks.uninstall()
        self._sites.uninstall()
        self.anomaly_mode.uninstall()

    def script_ended(self, end: ScriptEnd) -> None:
        """The script ended before its update `failing`: that update, one the script
        never made on gradients or a loss it found not finite itself, is recorded as the
        run found it (`UpdateHooks.unmade_update`)."""
        try:
            self.hooks.unmade_update(end.error, end.held)
        except StepRecorded:
            pass

    def before_update(self, index: int, optimizer: torch.optim.Optimizer) -> None:
        if optimizer not in self._optimizers:
            self._optimizers.append(optimizer)
        if index < self.failing:
            if self.recorder is not None:  # an update inside the window: applied, unrecorded
                self._paused.enter_context(self.recorder.paused())
            return
        recorder, self.recorder = self.recorder, None
        if recorder is None:
            why = f"the rerun of your script never ended update {self.window_after}"
            step_events.write(self.out, RecordedStep(False, why=why))
            raise StepRecorded(index)
        losses = list(self.hooks.roots)  # every micro-batch's, under accumulation
        if self.paths:
            self._write_paths(recorder, optimizer, losses)
            raise StepRecorded(index)
        recorder.mark_bad([*losses, *dense_grads(optimizer)])
        self._window.close()
        step = RecordedStep(True, tuple(recorder.events), tuple(recorder.bad_ids), recorder.stats)
        step_events.write(self.out, step)
        if isinstance(recorder, TapedRecorder):
            _write_tape(self.tape, recorder)
        raise StepRecorded(index)

    def _write_paths(self, recorder: PathRecorder, optimizer, losses: list) -> None:
        """Write the step's events and what the path search needs for the parameters
        `optimizer` is about to update without a gradient."""
        with recorder.paused():
            cut = missing_gradients(optimizer)
            names = tuple(self._parameters.get(id(p), f"param{i}") for i, p in enumerate(cut))
            loss_ids = tuple(recorder.key(t) for t in losses)
        self._window.close()  # the recorder reads its last outputs' autograd history
        paths = CutPaths(
            dict(recorder.grad_enabled), dict(recorder.carries), tuple(recorder.exits), names,
            loss_ids, dict(recorder.off_at),
        )  # fmt: skip
        step_events.write(
            self.out, RecordedStep(True, tuple(recorder.events), (), recorder.stats, paths=paths)
        )

    def after_update(self, update: Update) -> None:
        self._paused.close()
        if update.index == self.window_after:
            self._open()

    def _open(self) -> None:
        """Start recording: the modules and parameters known so far are named."""
        models = self._models()
        self._module_names.update(module_names(models))
        self._parameters.update(parameter_names(models, self._optimizers))
        scope = ModuleScope(self._module_names)
        if self.paths:
            self.recorder = PathRecorder(scope, self._parameters)
            self._window.enter_context(self.recorder.exits_noted())
        elif self.tape is not None:
            self.recorder = TapedRecorder(scope, self._parameters)
        else:
            self.recorder = OpRecorder(scope, self._parameters)
        self._window.enter_context(scope.hooked())
        self._window.enter_context(self.recorder)

    def _optimizer_built(self, optimizer: torch.optim.Optimizer) -> None:
        """Name the parameters of an optimizer built while the window is open (a failing
        first step's: its window opens before the script runs) that are tensors the
        script binds to its own names, held by no module (`logits_p = torch.zeros(...,
        requires_grad=True)`): the step reads them as weights. A module's parameters are
        named when the module is first called (`_name_late`), by its path."""
        if self.recorder is None:
            return
        with self.recorder.paused():
            bound = script_tensor_names()
        for group in optimizer.param_groups:
            for parameter in group["params"]:
                name = bound.get(id(parameter))
                if name is not None:
                    self._parameters.setdefault(id(parameter), name)

    def _models(self) -> list[torch.nn.Module]:
        """The roots that hold parameters (a loss module called alone is not a model)."""
        return [root for root in self._roots if next(root.parameters(), None) is not None]

    def _entered(self, module, args) -> None:
        if self._depth == 0 and all(module is not root for root in self._roots):
            self._roots.append(module)
            if self.recorder is not None:
                self._name_late(module)
        self._depth += 1

    def _left(self, module, args, output) -> None:
        self._depth = max(self._depth - 1, 0)

    def _name_late(self, module: torch.nn.Module) -> None:
        """Name a root first called inside the window, keeping every name given so far."""
        with self.recorder.paused():
            names = module_names(self._models())
            parameters = parameter_names(self._models(), self._optimizers)
        for key, name in names.items():
            self._module_names.setdefault(key, name)
        for key, name in parameters.items():
            self._parameters.setdefault(key, name)


def _write_tape(folder: str, recorder: TapedRecorder) -> None:
    """Write the tape; why it could not be, to `tape_error.txt` beside it (the step's
    events are written already: the run's diagnosis never waits on the dump)."""
    try:
        write_tape(folder, recorder)
    except Exception as error:  # the dump is extra
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, TAPE_ERROR), "w", encoding="utf-8") as handle:
            handle.write(f"{type(error).__name__}: {error}\n")
