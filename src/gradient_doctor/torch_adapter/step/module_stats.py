"""Per-module health of PyTorch steps: gradient and weight norms, updates, activations, stuck units.

The layers of a PyTorch model are its modules that own parameters directly (a `Linear`,
a `Conv2d`, a `BatchNorm2d`), named by their path in the model (`encoder.layers.3.attn`,
as `module_scope` names them). Every update, the per-gradient norms the guard's fused
check read anyway (`Check.norms`) are kept with their parameters; they are grouped by
module when the other statistics are read. One step in ten
(`LAYER_STATS_EVERY`, as TensorFlow's; later as the time budget of `sample_schedule`
allows) is sampled: its forward runs under global module
hooks and a `TorchFunctionMode` that see each parameter-owning module's output (its
largest |value|: the pre-activation of the activation that follows) and each ReLU, tanh
and sigmoid, module or functional (the fraction of its units 0 for the whole batch, or
in the flat part of the curve, with the thresholds of `core.records`), put with the
module whose output it read; and each risky op the user calls there (exp, expm1, acos,
asin: the largest input, or |input|, for the headroom detector's forecast, with the dim
a sum then normalises it along). Its update is bracketed by a copy of the parameters, for
the norm of the change over the weight norm. All of it stays on the device until the
sampled step is read, with one host copy; the other steps pay only a list append.
Everything is read, never written: training computes what it computes unwatched.
"""

from __future__ import annotations

import math
import os
import sys
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)
from torch.overrides import TorchFunctionMode

from gradient_doctor.core import source_frames
from gradient_doctor.core.dtype_limits import dtype_limits
from gradient_doctor.core.evidence import LossInput
from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.records import (
    SIGMOID_FLAT,
    TANH_FLAT,
    HeadroomSample,
    LayerRecord,
    StepRecord,
)
from gradient_doctor.torch_adapter.hooks.compile_calls import compiled
from gradient_doctor.torch_adapter.localize import source_lines
from gradient_doctor.torch_adapter.localize.module_scope import module_names
from gradient_doctor.torch_adapter.step.loss_inputs import LOSSES, SQUASHES, LossInputs
from gradient_doctor.torch_adapter.step.sample_schedule import SampleSchedule

# The activations whose units can die (0 for the whole batch) or saturate, by the name of
# the torch function (module forwards call these too).
_DEAD = frozenset({"relu", "relu_", "relu6"})
_SATURATING = {"tanh": "tanh", "tanh_": "tanh", "sigmoid": "sigmoid", "sigmoid_": "sigmoid"}
# The risky ops whose input a sampled forward measures against its limit when the user
# calls them (TensorFlow's headroom probes measure the same), by torch function name:
# (op type, headroom kind). Log, sqrt and division are not: a tiny positive input is
# harmless there, and its distance to 0 cannot tell it from one about to cross.
_RISKY = {
    **dict.fromkeys(("exp", "exp_"), ("Exp", "max_input")),
    **dict.fromkeys(("expm1", "expm1_", "special_expm1"), ("Expm1", "max_input")),
    **dict.fromkeys(("acos", "acos_", "arccos"), ("Acos", "abs_input")),
    **dict.fromkeys(("asin", "asin_", "arcsin"), ("Asin", "abs_input")),
}
# Reductions whose dim is the axis a risky op's output is normalised along (a
# hand-written softmax's sum): its fix shifts the input by the max along it.
_SUMS = frozenset({"sum", "mean", "nansum"})
# torch's dispatch of a torch function to the modes, between the user's call and the mode.
_OVERRIDES = os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "overrides.py")
# True while TorchDynamo traces (a constant it folds); torch before 2.3 had none.
_is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)
# Modules whose outputs hold their units (channels) on axis 1, not the last axis.
_CHANNELS_FIRST = (
    torch.nn.modules.conv._ConvNd,
    torch.nn.modules.batchnorm._NormBase,
    torch.nn.GroupNorm,
)


@dataclass
class _Sample:
    """What a sampled step measured, on the device until read.

    Attributes:
        activations: module id -> {field: 0-d tensor}, the max over its calls.
        weights: (parameters, per-parameter weight norms) of each sampled update.
        updates: (parameters, per-parameter norms of the change) of each update.
        copies: optimizer id -> (parameters, their values before the update).
        risky: (module id, file, line, op type) -> the risky op's measure there.
    """

    activations: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)
    weights: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = field(default_factory=list)
    updates: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = field(default_factory=list)
    copies: dict[int, tuple[list[torch.Tensor], list[torch.Tensor]]] = field(default_factory=dict)
    risky: dict[tuple, _RiskyOp] = field(default_factory=dict)


@dataclass
class _RiskyOp:
    """One risky op of the user's in a sampled step: its largest input (or |input|),
    the max over its calls, on the device until read. `module` is the id of the module
    running it, None for the user's code outside any (the loss written in the loop)."""

    module: int | None
    op: str
    kind: str
    dtype: str
    source: SourceLine
    value: torch.Tensor
    reduction_axis: int | None = None


class ModuleStats:
    """Per-module statistics of the watched steps, as `LayerRecord`s.

    The owner calls `begin_sample()` before a step to sample (`samples(step)`, as the
    `SampleSchedule` says), `update_start(optimizer)` and
    `update_end(optimizer)` around each applied update, `note_grads` with each update's
    check, and `records(step, ...)` once per finite step.

    Args:
        optimizers: returns the watched optimizers (their parameters say which models
            are trained: a frozen target network is not reported).
        models: the models trained, when known; others are found as their forward runs.
        schedule: the steps to sample. Defaults to a `SampleSchedule()`: one in ten,
            then as its time budget allows.
        on_loss_input: called with each loss of a sampled step handed scores of the
            wrong kind (`loss_inputs`); None looks at no loss.
    """

    def __init__(
        self,
        optimizers: Callable[[], Sequence[torch.optim.Optimizer]],
        models: Iterable[torch.nn.Module] = (),
        schedule: SampleSchedule | None = None,
        on_loss_input: Callable[[LossInput], None] | None = None,
    ) -> None:
        self.schedule = schedule or SampleSchedule()
        self.loss_inputs = LossInputs(on_loss_input) if on_loss_input is not None else None
        self._optimizers = optimizers
        self._roots: list[weakref.ref] = []
        self._owner: dict[int, int] = {}  # parameter id -> id of the module owning it
        for model in models:
            self._add_root(model)
        self._current: list[tuple[list[torch.Tensor], torch.Tensor]] = []  # this step's
        # The steps since the read (at most the longest period's).
        self._ring: deque[tuple[int, list]] = deque(maxlen=self.schedule.periods[-1])
        self._sample: _Sample | None = None
        self._pending: list[_Sample] = []  # sealed samples, read at the next sampled step
        self._handles: list = []
        self._stack: list[torch.nn.Module] = []
        self._mode: _Activations | None = None
        self._produced: dict[int, tuple[weakref.ref, torch.nn.Module]] = {}
        self._latest: tuple[LayerRecord, ...] | None = None
        self._headroom: tuple[HeadroomSample, ...] = ()  # the last sampled step's
        self._risky_outputs: dict[int, tuple[weakref.ref, _RiskyOp]] = {}
        self._forwards_watched = not any(compiled(model) for model in models)

    def samples(self, step: int) -> bool:
        """Whether `step` is a sampled step."""
        return self.schedule.samples(step)

    @property
    def hooked(self) -> bool:
        """Whether the forward hooks are on (from a sampled step's start to its update)."""
        return bool(self._handles)

    @property
    def models(self) -> list[torch.nn.Module]:
        """The models seen so far (modules called outside any other, holding parameters)."""
        return [root for root in (ref() for ref in self._roots) if root is not None]

    @property
    def latest(self) -> tuple[LayerRecord, ...] | None:
        """The last sampled step's records, or None before the first."""
        return self._latest

    # Every update.

    def note_grads(self, parameters: list[torch.Tensor], norms: list[float] | None) -> None:
        """Keep one update's per-gradient norms (in `parameters`' order)."""
        if norms is not None and parameters:
            self._current.append((parameters, norms))

    def forget_step(self) -> None:
        """Drop what a step that failed (or raised) measured, and its hooks: a run that
        stops there must not leave the global hooks behind."""
        self._current = []
        self._sample = None
        self._unhook()
        self.schedule.interrupted()

    # The sampled steps.

    def stop_watching_forwards(self) -> None:
        """Hook no forward from now on (the script compiles its model: `CompileCalls`);
        the updates' statistics go on."""
        self._forwards_watched = False
        self._unhook()

    def begin_sample(self) -> None:
        """Measure the forward that follows (hooks on until the next update starts;
        none once forwards are no longer watched)."""
        if self._sample is not None and not self._handles:
            # The last step's sample, sealed by its update but not read yet (its step ends
            # when the next one's first update comes): sampling every step, it is kept.
            self._pending.append(self._sample)
            self._sample = None
        if self._sample is None:
            self._sample = _Sample()
        if self._forwards_watched and _compiled_anything():
            self._forwards_watched = False  # compiled before the doctor could be told
        if not self._handles and self._forwards_watched:
            self._handles = [
                register_module_forward_pre_hook(self._enter),
                register_module_forward_hook(self._leave, always_call=True),
            ]

    def forwards_done(self) -> None:
        """An update was asked for: a sampled step's forwards and loss are over, so the
        hooks and the mode go off before the update's check (whose torch calls the mode
        would otherwise see, one Python call each)."""
        if self._handles:
            self._unhook()

    def update_start(self, optimizer: torch.optim.Optimizer) -> None:
        """Before an update of a sampled step: stop watching forwards, take the weight
        norms and a copy of the parameters."""
        sample = self._sample
        if sample is None:
            return
        self._unhook()
        params = [p for group in optimizer.param_groups for p in group["params"]]
        params = [p for p in params if id(p) in self._owner and p.layout == torch.strided]
        if not params:
            return
        with torch.no_grad():
            sample.weights.append((params, list(torch._foreach_norm(params))))
            sample.copies[id(optimizer)] = (params, [p.detach().clone() for p in params])

    def update_end(self, optimizer: torch.optim.Optimizer) -> None:
        """After an applied update of a sampled step: the norm of each parameter's change."""
        sample = self._sample
        copied = sample.copies.pop(id(optimizer), None) if sample is not None else None
        if copied is None:
            return
        params, before = copied
        with torch.no_grad():
            torch._foreach_sub_(before, [p.detach() for p in params])  # the copy, reused
            sample.updates.append((params, list(torch._foreach_norm(before))))

    def records(
        self, step: int, loss: float | None, grad_norm: float | None
    ) -> tuple[StepRecord, ...]:
        """The records of finite step `step`: its loss and gradient norm; on a sampled
        step first each module's gradient norm of every step since the last read, then
        the step's other module statistics (one host copy)."""
        self._ring.append((step, self._current))
        self._current = []
        if self._sample is not None and not self._handles:  # sealed by an update
            self._pending.append(self._sample)
            self._sample = None
        if not self.samples(step) or not self._pending:
            self.schedule.step_ended(step)
            return (StepRecord(step, loss=loss, grad_norm=grad_norm),)
        names = self._trained_names()
        history = self._read(names)
        self.schedule.step_ended(step)
        return (*history, StepRecord(step, loss, grad_norm, self._latest or (), self._headroom))

    def close(self) -> None:
        """Remove the hooks (the run ended)."""
        self._unhook()

    # Reading.

    def _read(self, names: dict[int, str]) -> list[StepRecord]:
        """Copy the ring and the pending samples to the host in one read, into records."""
        tensors: list[torch.Tensor] = []
        size = 0

        def take(values: Sequence[torch.Tensor]) -> slice:
            nonlocal size
            start = size
            for value in values:  # measured under no_grad: no detach needed
                tensors.append(value if value.dim() == 1 else value.reshape(-1))
                size += tensors[-1].numel()
            return slice(start, size)

        ring, self._ring = list(self._ring), deque(maxlen=self._ring.maxlen)
        samples, self._pending = self._pending, []
        weights = [(p, take(n)) for sample in samples for p, n in sample.weights]
        updates = [(p, take(n)) for sample in samples for p, n in sample.updates]
        activations = [
            (module, name, take([value]))
            for sample in samples
            for module, fields in sample.activations.items()
            for name, value in fields.items()
        ]
        risky = [(op, take([op.value])) for sample in samples for op in sample.risky.values()]
        values = []
        if tensors:
            first = tensors[0]
            if any(t.dtype != torch.float32 or t.device != first.device for t in tensors):
                tensors = [t.to(first.device, torch.float32) for t in tensors]
            values = torch.cat(tensors).tolist()

        owners: dict[tuple[int, ...], list[str | None]] = {}  # by the parameters' ids

        def squares(entries) -> dict[str, float]:
            """Each module's sum of its parameters' squared norms."""
            sums: dict[str, float] = {}
            for params, norms in entries:
                # The same parameters update after update: their modules are looked up once.
                key = tuple(map(id, params))
                modules = owners.get(key)
                if modules is None:
                    modules = owners[key] = [names.get(self._owner.get(i, -1)) for i in key]
                for name, norm in zip(modules, norms):
                    if name is not None:
                        sums[name] = sums.get(name, 0.0) + norm * norm
            return sums

        history = []
        for step, step_updates in ring:
            grads = squares(step_updates)
            if grads:
                layers = [LayerRecord(name, math.sqrt(v)) for name, v in grads.items()]
                history.append(StepRecord(step, layers=tuple(layers)))
        weight_sq = squares((p, values[where]) for p, where in weights)
        update_sq = squares((p, values[where]) for p, where in updates)
        measured: dict[str, dict[str, float]] = {}
        for module, field_name, where in activations:
            name, value = names.get(module), values[where][0]
            if name is None or not math.isfinite(value):
                continue
            fields = measured.setdefault(name, {})
            fields[field_name] = max(fields.get(field_name, value), value)
        layers = []
        for name in _ordered(names, weight_sq, measured):
            weight = math.sqrt(weight_sq[name]) if name in weight_sq else None
            change = math.sqrt(update_sq[name]) if name in update_sq else None
            ratio = change / weight if change is not None and weight else None
            layers.append(
                LayerRecord(name, weight_norm=weight, update_ratio=ratio, **measured.get(name, {}))
            )
        self._latest = tuple(layers)
        self._headroom = _headroom(risky, values, names)
        return history

    def _trained_names(self) -> dict[int, str]:
        """Module id -> path, over the models whose parameters a watched optimizer holds."""
        trained = {id(p) for o in self._optimizers() for g in o.param_groups for p in g["params"]}
        roots = [root for root in self.models if any(id(p) in trained for p in root.parameters())]
        return module_names(roots)

    # Forward hooks of a sampled step.

    def _add_root(self, module: torch.nn.Module) -> None:
        """Note a model (a module called outside any other) and its parameters' owners."""
        if any(ref() is module for ref in self._roots) or id(module) in self._owner.values():
            return
        if next(module.parameters(), None) is None:  # a loss module: no layer of a model
            return
        self._roots.append(weakref.ref(module))
        for owner in module.modules():
            for param in owner._parameters.values():
                if param is not None:
                    self._owner.setdefault(id(param), id(owner))

    def _enter(self, module, args) -> None:
        if _is_compiling():  # traced into compiled code: measure nothing
            return
        if not self._stack:
            self._add_root(module)
            if self._mode is None:
                self._mode = _Activations(self)
                self._mode.__enter__()
        self._stack.append(module)

    def _leave(self, module, args, output) -> None:
        if _is_compiling() or not self._stack:
            return
        self._stack.pop()
        sample = self._sample
        if sample is not None and module._parameters and isinstance(output, torch.Tensor):
            if _inside_transform():
                return
            if output.is_floating_point() and output.numel():
                with torch.no_grad(), _unobserved():
                    largest = output.detach().abs().amax()
                    self._keep(sample, module, "activation_max_abs", largest)
                self._produced[id(output)] = (weakref.ref(output), module)
        # The mode stays on after the model's forward, until the update (`_unhook`):
        # the loss the user writes in the loop, from the model's outputs, is measured too.

    def activation(self, name: str, inputs: tuple, output: torch.Tensor) -> None:
        """Measure one ReLU / tanh / sigmoid output: its stuck units, with the module
        whose output it read (or the module running it)."""
        sample = self._sample
        if sample is None or not self._stack:  # a loss's relu (a hinge) is no layer's unit
            return
        if _inside_transform():
            return
        if output.dim() < 2 or not output.is_floating_point():
            return
        source = inputs[0] if inputs and isinstance(inputs[0], torch.Tensor) else None
        produced = self._produced.get(id(source)) if source is not None else None
        if produced is not None and produced[0]() is source:
            module = produced[1]
            axis = 1 if isinstance(module, _CHANNELS_FIRST) else -1
        else:
            module = self._stack[-1]
            axis = 1 if output.dim() in (4, 5) else -1
        with torch.no_grad(), _unobserved():
            fraction, field_name = _stuck_fraction(name, output.detach(), axis)
            self._keep(sample, module, field_name, fraction)

    def risky(self, name: str, inputs: tuple, output: object) -> None:
        """Measure a risky op the user called in a sampled step (not one a library called
        for the user: those guard their own inputs), with the module running it, if any:
        in a forward, or in the loss code after it."""
        sample = self._sample
        source = inputs[0] if inputs else None
        if sample is None or not isinstance(source, torch.Tensor) or _inside_transform():
            return
        if not source.is_floating_point() or not source.numel():
            return
        line = _users_call()
        if line is None:
            return
        op, kind = _RISKY[name]
        module = id(self._stack[-1]) if self._stack else None
        with torch.no_grad(), _unobserved():
            values = source.detach()
            value = (values if kind == "max_input" else values.abs()).amax().float()
            key = (module, line.file, line.line, op)
            known = sample.risky.get(key)
            if known is None:
                computed = output if isinstance(output, torch.Tensor) else source  # autocast's
                dtype = str(computed.dtype).removeprefix("torch.")
                known = sample.risky[key] = _RiskyOp(module, op, kind, dtype, line, value)
            else:
                known.value = torch.maximum(known.value, value)
        if isinstance(output, torch.Tensor):
            self._risky_outputs[id(output)] = (weakref.ref(output), known)

    def summed(self, inputs: tuple, kwargs: dict) -> None:
        """Note the dim a risky op's output is summed along (a hand-written softmax's)."""
        summed = inputs[0] if inputs else None
        entry = self._risky_outputs.get(id(summed)) if summed is not None else None
        if entry is None or entry[0]() is not summed:
            return
        dim = inputs[1] if len(inputs) > 1 else kwargs.get("dim")
        if isinstance(dim, list | tuple) and len(dim) == 1:
            dim = dim[0]
        if isinstance(dim, int) and not isinstance(dim, bool):
            entry[1].reduction_axis = dim

    @staticmethod
    def _keep(sample: _Sample, module, field_name: str, value: torch.Tensor) -> None:
        fields = sample.activations.setdefault(id(module), {})
        previous = fields.get(field_name)
        fields[field_name] = value if previous is None else torch.maximum(previous, value)

    def _unhook(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(None, None, None)
        self._stack.clear()
        self._produced.clear()
        self._risky_outputs.clear()
        if self.loss_inputs is not None:
            self.loss_inputs.clear()


class _Activations(TorchFunctionMode):
    """Hands each ReLU / tanh / sigmoid call of a sampled forward, and each risky op of
    the step until its update (the loss code too), to the stats; each squash and each
    loss that reads logits or log-probabilities to the stats' `loss_inputs`."""

    def __init__(self, stats: ModuleStats) -> None:
        super().__init__()
        self.stats = stats

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        output = func(*args, **kwargs)
        if _is_compiling():  # traced into compiled code: measure nothing
            return output
        name = getattr(func, "__name__", None)
        losses = self.stats.loss_inputs
        if losses is not None:
            if name in SQUASHES:
                losses.squashed(name, output)
            elif name in LOSSES:
                losses.loss(name, args, kwargs)
        if (name in _DEAD or name in _SATURATING) and isinstance(output, torch.Tensor):
            self.stats.activation(name, args, output)
        elif name in _RISKY:
            self.stats.risky(name, args, output)
        elif name in _SUMS and self.stats._risky_outputs:
            self.stats.summed(args, kwargs)
        return output


def _stuck_fraction(name: str, output: torch.Tensor, axis: int) -> tuple[torch.Tensor, str]:
    """The fraction of `output`'s units (along `axis`) stuck for the whole batch, and the
    record field it goes in: a ReLU's units at 0 (dead), a tanh's or sigmoid's in the flat
    part of the curve (saturated). Each unit's extreme over every other axis is reduced
    in place of a full-size mask (a ReLU's output is never below 0, so its largest value
    is 0 exactly when all are)."""
    axis %= output.dim()
    others = tuple(d for d in range(output.dim()) if d != axis)
    if name in _DEAD:
        return (output.amax(dim=others) == 0).float().mean(), "dead_fraction"
    if _SATURATING[name] == "tanh":
        nearest = output.abs().amin(dim=others)  # each unit's value closest to 0
        return (nearest > TANH_FLAT).float().mean(), "saturated_fraction"
    nearest = (output - 0.5).abs().amin(dim=others)  # each unit's value closest to 1/2
    return (nearest > 0.5 - SIGMOID_FLAT).float().mean(), "saturated_fraction"


def _users_call() -> SourceLine | None:
    """The user's line calling the torch function a mode is handling now, or None when
    the innermost caller outside the doctor and torch's dispatch is not the user's."""
    frame = sys._getframe(1)
    while frame is not None and (
        source_frames.is_doctor_file(frame.f_code.co_filename)
        or frame.f_code.co_filename == _OVERRIDES
    ):
        frame = frame.f_back
    if frame is None or not source_lines.is_user_file(frame.f_code.co_filename):
        return None
    return source_frames.user_line(frame, source_lines.is_user_file)


def _headroom(
    risky: list[tuple[_RiskyOp, slice]], values: list[float], names: dict[int, str]
) -> tuple[HeadroomSample, ...]:
    """The risky ops' measures as headroom samples (finite ones, of a trained model's
    modules or of the user's code outside any), one series per module, line and op."""
    samples = {}
    for op, where in risky:
        layer, value = names.get(op.module), values[where][0]
        if (layer is None and op.module is not None) or not math.isfinite(value):
            continue  # a module of no trained model (a frozen target network's)
        key = f"{layer + '/' if layer else ''}{op.op}@{op.source.file}:{op.source.line}"
        limits = dtype_limits(op.dtype)
        known = samples.get(key)
        if known is not None and known.value >= value:
            continue
        samples[key] = HeadroomSample(
            key=key,
            op=op.op,
            layer=layer,
            file=op.source.file,
            line=op.source.line,
            code=op.source.code,
            dtype=op.dtype,
            kind=op.kind,
            value=value,
            limit=limits.exp_limit if op.kind == "max_input" else 1.0,
            reduction_axis=op.reduction_axis,
            framework_op=op.op.lower(),  # the aten name of each of `_RISKY`'s op types
        )
    return tuple(samples.values())


def _compiled_anything() -> bool:
    """Whether TorchDynamo compiled a graph in this process (a model compiled before
    `watch` was called): a global hook would be traced into it from then on."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    return dynamo is not None and dynamo.counters["stats"]["unique_graphs"] > 0


def _inside_transform() -> bool:
    """True inside a `torch.func` transform (vmap, grad, jvp): its tensors are wrappers
    valid only there, and a measurement kept past it would be read after it ended (which
    raises), so the forward's statistics skip such calls."""
    return torch._C._functorch.peek_interpreter_stack() is not None


def _unobserved():
    """A block whose own torch calls skip every torch-function mode: the measurements a
    sampled forward's hooks make are not handed back to its `_Activations` mode."""
    return torch._C.DisableTorchFunction()


def _ordered(names: dict[int, str], *found: dict[str, object]) -> list[str]:
    """The measured modules in model order (`names`' order), then any others."""
    seen = [name for name in names.values() if any(name in f for f in found)]
    rest = [name for f in found for name in f if name not in seen]
    return list(dict.fromkeys(seen + rest))
