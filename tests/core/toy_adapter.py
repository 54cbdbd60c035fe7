"""A toy NumPy framework and its gradient-doctor adapter: the proof that a framework needs no more.

The framework: ops that compute with NumPy and, while a step is replayed, record each
op as a neutral `OpEvent` (forward ops, and the backward ops a hand-written backward
runs, each naming the forward op whose gradient it computes); variables read through
a `ReadVariableOp`; an `SGD` optimizer whose `apply` the adapter guards.

The adapter: `install` routes `SGD.apply` through a guard that skips a non-finite
update; `watch(step)` is the hook that reads the guard after each step and hands a
`StepReading` to the session; `localize` replays the failing step under a recorder
and walks its events with the core's `trace_evidence`; `fix_trials` tries the
learning-rate remedies from the last good state. Nothing here is imported by the core.
"""

from __future__ import annotations

import contextlib
import linecache
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from gradient_doctor.core.evidence import StepHistory, TrainingSetup
from gradient_doctor.core.findings import SourceLine, TensorStats
from gradient_doctor.core.fix_trials import TrialOutcome
from gradient_doctor.core.op_trace import OpEvent
from gradient_doctor.core.origin_search import trace_evidence
from gradient_doctor.core.pipeline import Adapter, Localized, Session, StepReading
from gradient_doctor.errors import TrainingStopped

# The framework's files: never the user's (nor NumPy's, nor the doctor's).
_FRAMEWORK_FILES = frozenset({os.path.abspath(__file__)})
_LIBRARY_DIRS = tuple(
    os.path.dirname(os.path.abspath(module.__file__)) + os.sep
    for module in (np, sys.modules["gradient_doctor"])
)
# The op type that reads a variable into the step (the core's weight-read vocabulary).
READ_VARIABLE = "ReadVariableOp"


def is_user_file(filename: str) -> bool:
    """The toy's source-frame filter: not the framework's, NumPy's or the doctor's file."""
    path = os.path.abspath(filename)
    return path not in _FRAMEWORK_FILES and not path.startswith(_LIBRARY_DIRS)


def user_line() -> SourceLine | None:
    """The innermost line of the user's code on the stack (where an op was called)."""
    frame = sys._getframe(1)
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return None
    code = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return SourceLine(os.path.relpath(frame.f_code.co_filename), frame.f_lineno, code)


def summarize(array: np.ndarray) -> TensorStats:
    """The neutral summary of one array (counts of NaN, Inf, zeros; the finite range)."""
    flat = np.asarray(array, np.float64).ravel()
    finite = flat[np.isfinite(flat)]
    return TensorStats(
        dtype=str(np.asarray(array).dtype),
        shape=tuple(np.shape(array)),
        min=float(finite.min()) if finite.size else None,
        max=float(finite.max()) if finite.size else None,
        nan=int(np.isnan(flat).sum()),
        inf=int(np.isinf(flat).sum()),
        zeros=int((flat == 0).sum()),
        size=int(flat.size),
        pos_inf=int(np.isposinf(flat).sum()),
        neg_inf=int(np.isneginf(flat).sum()),
        min_abs=float(np.abs(finite).min()) if finite.size else None,
    )


class Recorder:
    """The ops of one replayed step, in order, with every tensor they read or wrote kept
    alive (so tensor ids stay unique), and the non-finite results the guard saw."""

    def __init__(self) -> None:
        self.events: list[OpEvent] = []
        self.tensors: dict[int, np.ndarray] = {}
        self.bad_ids: list[int] = []
        self._producer: dict[int, OpEvent] = {}

    def note(self, op_type: str, inputs: tuple, output: np.ndarray, layer, of) -> None:
        """Record one op; `of` is the forward tensor whose gradient it computes (or None)."""
        for tensor in (*inputs, output):
            self.tensors[id(tensor)] = tensor
        forward = self._producer.get(id(of)) if of is not None else None
        event = OpEvent(
            index=len(self.events),
            op_type=op_type,
            op_name=f"{layer}/{op_type}" if layer else op_type,
            layer=layer,
            phase="forward" if of is None else "backward",
            gradient_of=forward.op_type if forward is not None else None,
            forward_index=forward.index if forward is not None else None,
            input_ids=tuple(id(t) for t in inputs),
            output_ids=(id(output),),
            inputs=tuple(summarize(t) for t in inputs),
            outputs=(summarize(output),),
            source=forward.source if forward is not None else user_line(),
            input_values=tuple(tuple(float(v) for v in np.ravel(t)[:3]) for t in inputs),
        )
        self.events.append(event)
        if of is None:
            self._producer.setdefault(id(output), event)

    @property
    def stats(self) -> dict[int, TensorStats]:
        """The summary of each tensor the step touched."""
        return {key: summarize(tensor) for key, tensor in self.tensors.items()}


_recording: list[Recorder] = []


def _op(op_type: str, compute: Callable, *inputs, layer=None, of=None) -> np.ndarray:
    """Run one op; record it while a step is replayed."""
    arrays = tuple(np.asarray(t, np.float32) for t in inputs)
    with np.errstate(all="ignore"):
        output = np.asarray(compute(*arrays), np.float32)
    if _recording:
        _recording[-1].note(op_type, arrays, output, layer, of)
    return output


# The ops, named as the core's op vocabulary names them.
def matmul(a, b, layer=None, of=None):
    return _op("MatMul", np.matmul, a, b, layer=layer, of=of)


def relu(x, layer=None):
    return _op("Relu", lambda v: np.maximum(v, 0), x, layer=layer)


def sigmoid(x, layer=None):
    return _op("Sigmoid", lambda v: 1 / (1 + np.exp(-v)), x, layer=layer)


def log(x, layer=None):
    return _op("Log", np.log, x, layer=layer)


def add(a, b, layer=None, of=None):
    return _op("AddV2", np.add, a, b, layer=layer, of=of)


def sub(a, b, layer=None, of=None):
    return _op("Sub", np.subtract, a, b, layer=layer, of=of)


def mul(a, b, layer=None, of=None):
    return _op("Mul", np.multiply, a, b, layer=layer, of=of)


def div(a, b, layer=None, of=None):
    return _op("RealDiv", np.divide, a, b, layer=layer, of=of)


def mean(x, layer=None):
    return _op("Mean", np.mean, x, layer=layer)


def transpose(x, of=None):
    return _op("Transpose", np.transpose, x, of=of)


class Variable:
    """A trained array, read into each step by a `ReadVariableOp` of its layer."""

    def __init__(self, value: np.ndarray, name: str) -> None:
        self.value = np.asarray(value, np.float32)
        self.name = name
        self.layer = name.rsplit("/", 1)[0]

    def read(self) -> np.ndarray:
        return _op(READ_VARIABLE, np.copy, self.value, layer=self.layer)


class SGD:
    """Plain gradient descent: `apply(loss, grads_and_variables)` updates each variable."""

    def __init__(self, learning_rate: float) -> None:
        self.learning_rate = learning_rate

    def apply(self, loss, grads_and_variables) -> None:
        for grad, variable in grads_and_variables:
            variable.value = variable.value - np.float32(self.learning_rate) * grad


@dataclass(frozen=True)
class _Plan:
    """A remedy as the toy can try it: the learning rate scaled."""

    remedy: str
    setting: str
    scale: float
    replacement: object = None


class ToyAdapter(Adapter):
    """The toy framework's side of the pipeline; it owns the run's `Session`.

    Args:
        optimizer: the `SGD` whose updates are guarded.
        variables: every trained `Variable` (saved and put back around trials).
        **session: passed to `Session` (stop_on_problem, on_finding, trial_steps, ...).
    """

    def __init__(self, optimizer: SGD, variables: list[Variable], **session) -> None:
        self.optimizer = optimizer
        self.variables = variables
        self.session = Session(self, **session)
        self._saved_apply = None
        self._latched = False  # a non-finite update closed the skip until `resume`
        self._last: tuple[float, float] = (math.nan, math.nan)  # loss, gradient norm
        self._skipped = 0

    # The hooks.

    def install(self) -> None:
        guard = self

        def guarded_apply(optimizer, loss, grads_and_variables):
            grads = [np.asarray(g, np.float64) for g, _ in grads_and_variables]
            norm = math.sqrt(sum(float(np.sum(g * g)) for g in grads))
            finite = math.isfinite(float(loss)) and math.isfinite(norm)
            if _recording:  # a replay: note what was not finite, update nothing
                if not finite:
                    bad = [loss] if not math.isfinite(float(loss)) else []
                    bad += [g for g, _ in grads_and_variables if not np.isfinite(g).all()]
                    _recording[-1].bad_ids.extend(id(t) for t in bad)
                return
            guard._last = (float(loss), norm)
            guard._latched = guard._latched or not finite
            if guard._latched:
                guard._skipped += 1
                return
            guard._saved_apply(optimizer, loss, grads_and_variables)

        self._saved_apply = SGD.apply
        SGD.apply = guarded_apply

    def uninstall(self) -> None:
        SGD.apply = self._saved_apply

    def watch(self, step: Callable) -> Callable:
        """The watched step: call it like `step(x, y)`."""

        def watched(x, y):
            self.session.before_step()
            result = step(x, y)
            loss, norm = self._last
            reading = StepReading(
                failed=self._latched, loss=loss, grad_norm=norm, skipped=self._skipped
            )
            finding = self.session.after_step(reading, replay=(step, x, y), batch=(x, y))
            if finding is not None and self.session.stop_on_problem:
                raise TrainingStopped(finding)
            return result

        return watched

    # The adapter protocol.

    def localize(self, replay, step: int, history: StepHistory, setup: TrainingSetup):
        function, x, y = replay
        recorder = Recorder()
        _recording.append(recorder)
        try:
            function(x, y)
        finally:
            _recording.pop()
        traced = trace_evidence(
            recorder.events,
            recorder.bad_ids,
            step,
            data_ids=frozenset({id(x), id(y)}),
            weight_reads=frozenset({READ_VARIABLE}),
            stats=recorder.stats,
        )
        evidence = replace(
            traced.evidence, history=history, setup=setup, reproduced=bool(recorder.bad_ids)
        )
        return Localized(evidence, rerun=replay)

    def training_setup(self) -> TrainingSetup:
        return TrainingSetup(learning_rate=self.optimizer.learning_rate)

    def is_user_file(self, filename: str) -> bool:
        return is_user_file(filename)

    def resume(self) -> None:
        self._latched, self._skipped = False, 0

    def fix_trials(self, finding, evidence, rerun) -> ToyTrials:
        return ToyTrials(self, finding, rerun)


class ToyTrials:
    """The one remedy the toy can try, a 10x lower learning rate, from the last good state
    on the failing batch (the toy keeps no snapshots)."""

    def __init__(self, adapter: ToyAdapter, finding, rerun) -> None:
        remedies = [fix.family for fix in finding.fixes] + [n.remedy for n in finding.not_fixes]
        self.plans = [
            _Plan(remedy, "learning_rate / 10", 0.1)
            for remedy in remedies
            if remedy == "lower_learning_rate"
        ]
        self.untried = None
        self.saved_steps = ()
        self._adapter = adapter
        self._rerun = rerun

    @contextlib.contextmanager
    def open(self):
        adapter = self._adapter
        saved = [v.value.copy() for v in adapter.variables], adapter._latched, adapter._skipped
        try:
            yield self
        finally:
            for variable, value in zip(adapter.variables, saved[0]):
                variable.value = value
            adapter._latched, adapter._skipped = saved[1:]

    def run(self, plan, start, failing: int, beyond: int) -> TrialOutcome:
        adapter, (function, x, y) = self._adapter, self._rerun
        remedy, setting = (plan.remedy, plan.setting) if plan is not None else (None, "")
        values = [v.value.copy() for v in adapter.variables]
        rate = adapter.optimizer.learning_rate
        adapter.optimizer.learning_rate = rate * (plan.scale if plan is not None else 1.0)
        steps, losses = max(failing - start.step, 0) + beyond, []
        try:
            for index in range(steps):
                adapter.resume()
                function(x, y)
                if adapter._latched:
                    return TrialOutcome(remedy, setting, steps, index + 1, index, tuple(losses))
                losses.append(adapter._last[0])
        finally:
            adapter.optimizer.learning_rate = rate
            for variable, value in zip(adapter.variables, values):
                variable.value = value
        return TrialOutcome(remedy, setting, steps, steps, None, tuple(losses))
