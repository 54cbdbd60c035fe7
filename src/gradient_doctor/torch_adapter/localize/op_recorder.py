"""The replay's dispatch mode: every aten op of a step, forward and backward, as `OpEvent`s."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

import torch
from torch.autograd.function import BackwardCFunction
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from gradient_doctor.core.findings import SourceLine, TensorStats
from gradient_doctor.core.op_trace import OpEvent
from gradient_doctor.torch_adapter.localize.module_scope import ModuleScope
from gradient_doctor.torch_adapter.localize.op_names import ALONG_DIMS, op_type
from gradient_doctor.torch_adapter.localize.source_lines import user_line
from gradient_doctor.torch_adapter.localize.tensor_stats import first_values, summarize

# The op type of a parameter's read into the step (the core's weight-read vocabulary):
# torch ops read a parameter directly, so the recorder writes one such event before
# the first op that reads each parameter.
READ_VARIABLE = "ReadVariableOp"
# Ops whose output memory is uninitialized: its values are no result of the step.
_UNINITIALIZED = frozenset(
    {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"}
)
# Ops that point a tensor at memory filled outside the step (a DataLoader worker's
# batch, rebuilt in the main process from shared memory): their output is data the step
# was fed, not values they computed, so no event is written for them.
_ADOPTS_STORAGE = frozenset({"set_"})
# In-place ops that overwrite their first argument whole: its old values feed nothing.
_OVERWRITES_FIRST = frozenset({"copy_", "fill_", "zero_", "uniform_", "normal_", "bernoulli_"})


@dataclass(frozen=True)
class OpPlace:
    """Where one op ran, as its event names it.

    Attributes:
        layer: the module path ("head.linear"), or None outside every module.
        where: its op name's prefix: the module path, and for a backward op its
            autograd node ("head.linear/AddmmBackward0").
        phase: "forward" or "backward".
        forward_index: for a backward op, the event index of the forward op it
            differentiates.
        gradient_of: that forward op's type.
        source: the user's line.
    """

    layer: str | None
    where: str | None
    phase: str
    forward_index: int | None
    gradient_of: str | None
    source: SourceLine | None


class OpRecorder(TorchDispatchMode):
    """Records the ops run while it is active, each with its inputs, outputs and place.

    A tensor's id in the events names one value of it: each op that writes a tensor,
    in place or new, gives it a new id, so the walk to the origin follows values, not
    storage. (A write through a view of it is not seen: the view gets the new id.)
    Every tensor seen is kept alive until the recorder is dropped.

    Args:
        scope: the module scope followed during the replay (the op's module path).
        parameters: parameter id -> its qualified name ("head.linear.weight").
    """

    def __init__(self, scope: ModuleScope, parameters: Mapping[int, str]) -> None:
        super().__init__()
        self.events: list[OpEvent] = []
        self.bad_ids: list[int] = []
        self.stats: dict[int, TensorStats] = {}
        self._scope = scope
        self._parameters = parameters
        self._current: dict[int, int] = {}  # tensor id -> the id of its value now
        self._count = 0
        self._alive: list[torch.Tensor] = []
        self._read: set[int] = set()
        # Forward events' outputs, until their autograd nodes are looked up; then each
        # node's forward event (the op whose gradient a backward op computes).
        self._pending: list[tuple[torch.Tensor, int]] = []
        self._forward_of: dict[object, OpEvent] = {}
        self._paused = False

    def key(self, tensor: torch.Tensor) -> int:
        """The id of `tensor`'s current value in the events: the one the last recorded op
        that wrote it gave it, or a new one for a tensor first seen (made before the replay)."""
        known = self._current.get(id(tensor))
        return known if known is not None else self._written(tensor)

    def _written(self, tensor: torch.Tensor) -> int:
        """A new id for `tensor`'s value (an op just wrote it, in place or new)."""
        if id(tensor) not in self._current:
            self._alive.append(tensor)
        self._current[id(tensor)] = self._count
        self._count += 1
        return self._count - 1

    def keys(self, values: Iterable[object]) -> frozenset[int]:
        """The ids of the tensors among `values` (nested in lists, tuples and dicts)."""
        return frozenset(self.key(t) for t in tree_leaves(list(values)) if _is_tensor(t))

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Run the doctor's own ops unrecorded (the replay's check of the update)."""
        self._paused = True
        try:
            yield
        finally:
            self._paused = False

    def mark_bad(self, tensors: Iterable[torch.Tensor]) -> None:
        """Note which of `tensors` (the update's losses and gradients) are not finite."""
        with self.paused(), torch.no_grad():
            for tensor in tensors:
                if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                    self.bad_ids.append(self.key(tensor))

    def current_id(self, tensor: torch.Tensor) -> int | None:
        """The id of `tensor`'s current value, or None for a tensor no op has read or
        written yet (unlike `key`, it gives none)."""
        return self._current.get(id(tensor))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._paused:
            return func(*args, **kwargs)
        if func.overloadpacket.__name__ in _ADOPTS_STORAGE:
            out = func(*args, **kwargs)
            for tensor in tree_leaves(out):  # a value no op of the step made: fed data
                if _is_tensor(tensor):
                    self._written(tensor)
            return out
        node = torch._C._current_autograd_node()
        return self.run_op(func, args, kwargs, lambda: self._live_place(node))[0]

    def run_op(
        self, func, args: tuple, kwargs: dict, place_of: Callable[[], OpPlace]
    ) -> tuple[object, OpPlace, OpEvent]:
        """Run one aten op and record its event: its inputs' and outputs' ids and values,
        and its place (`place_of`, asked once the op ran: the live step's module scope and
        autograd node, or a crash dump's record of them in a replay).

        Returns:
            The op's output, its place, and its event.
        """
        name = func.overloadpacket.__name__
        inputs = [t for t in tree_leaves((args, kwargs)) if _is_tensor(t)]
        if name in _OVERWRITES_FIRST and inputs:
            inputs = inputs[1:]
        for tensor in inputs:
            self._note_parameter(tensor)
        input_ids = tuple(self.key(t) for t in inputs)
        input_stats = tuple(self._summary(t, key) for t, key in zip(inputs, input_ids))
        values = tuple(first_values(t) for t in inputs)
        out = func(*args, **kwargs)
        outputs = [t for t in tree_leaves(out) if _is_tensor(t)]
        output_ids = tuple(self._written(t) for t in outputs)
        output_stats = tuple(
            _unwritten(t) if name in _UNINITIALIZED else self._summary(t, key, fresh=True)
            for t, key in zip(outputs, output_ids)
        )
        place = place_of()
        called = self._called_for(name, inputs, output_stats, place)
        if called is not None:
            name, inputs, input_ids, input_stats, values = called
        event = OpEvent(
            index=len(self.events),
            op_type=op_type(name, inputs[1].dim() if len(inputs) > 1 else None),
            op_name=f"{place.where}/aten.{name}" if place.where else f"aten.{name}",
            layer=place.layer,
            phase=place.phase,
            gradient_of=place.gradient_of,
            forward_index=place.forward_index,
            input_ids=input_ids,
            output_ids=output_ids,
            inputs=input_stats,
            outputs=output_stats,
            source=place.source,
            input_values=values,
            axes=_dims(args) if name in ALONG_DIMS else None,
            framework_op=name,
        )
        self.events.append(event)
        self._pending.extend((t, event.index) for t in outputs)
        return out, place, event

    def _called_for(self, name: str, inputs: list, output_stats, place: OpPlace):
        """The torch function the user called, as the event of an op of its own that made
        a non-finite value from no input: `torch.logdet(w)` runs as `_linalg_slogdet`,
        then `scalar_tensor(nan)` picked by `where` for a negative determinant, and the
        op that made the NaN is the function's, not the constant's. The event then reads
        the function's tensor arguments (the walk goes back through them), under the
        function's name. None for any other op.

        Returns:
            (name, inputs, input ids, input stats, input values), or None.
        """
        call = self._scope.call
        if (
            inputs
            or call is None
            or not call.tensors
            or call.name == name
            or place.phase != "forward"
            or all(stats.finite for stats in output_stats)
        ):
            return None
        tensors = list(call.tensors)
        for tensor in tensors:
            self._note_parameter(tensor)
        ids = tuple(self.key(t) for t in tensors)
        stats = tuple(self._summary(t, key) for t, key in zip(tensors, ids))
        values = tuple(first_values(t) for t in tensors)
        return call.name, tensors, ids, stats, values

    def _live_place(self, node) -> OpPlace:
        """The place of the op that just ran in the live step: a backward op (`node`,
        its autograd node) belongs to the module and line of the forward op it
        differentiates; a forward op to the module running and the user's line."""
        forward = self._forward_event(node) if node is not None else None
        layer = forward.layer if forward is not None else self._scope.current
        if node is not None:
            where = f"{layer}/{node.name()}" if layer else node.name()
        else:
            where = layer
        if isinstance(node, BackwardCFunction):
            # A custom autograd Function's backward, written by the user: its ops run
            # at the user's own lines, which are what a fix edits.
            return OpPlace(
                layer=layer,
                where=where,
                phase="backward",
                forward_index=forward.index if forward is not None else None,
                gradient_of=None,
                source=user_line(),
            )
        return OpPlace(
            layer=layer,
            where=where,
            phase="backward" if node is not None else "forward",
            forward_index=forward.index if forward is not None else None,
            gradient_of=forward.op_type if forward is not None else None,
            source=forward.source if forward is not None else user_line(),
        )

    def _summary(self, tensor: torch.Tensor, key: int, fresh: bool = False) -> TensorStats:
        """The summary of one tensor value, computed once per id."""
        known = None if fresh else self.stats.get(key)
        if known is None:
            known = self.stats[key] = summarize(tensor)
        return known

    def _note_parameter(self, tensor: torch.Tensor) -> None:
        """Write the read event of a parameter the first time an op reads it."""
        name = self._parameters.get(id(tensor))
        if name is None or id(tensor) in self._read:
            return
        self._read.add(id(tensor))
        key = self.key(tensor)
        layer = name.rpartition(".")[0] or None
        self.events.append(
            OpEvent(
                index=len(self.events),
                op_type=READ_VARIABLE,
                op_name=name,
                layer=layer,
                phase="forward",
                gradient_of=None,
                forward_index=None,
                input_ids=(),
                output_ids=(key,),
                inputs=(),
                outputs=(self._summary(tensor, key),),
                source=None,
            )
        )

    def _forward_event(self, node) -> OpEvent | None:
        """The forward event whose output's autograd node is `node`, or None (a leaf's
        gradient accumulation, or an op recorded before the replay began)."""
        if node not in self._forward_of:
            for tensor, index in self._pending:
                grad_fn = _grad_fn(tensor)
                if grad_fn is not None and grad_fn not in self._forward_of:
                    self._forward_of[grad_fn] = self.events[index]
            self._pending.clear()
        return self._forward_of.get(node)


def parameter_values(events: Iterable[OpEvent]) -> dict[int, str]:
    """The tensors that are a parameter's value as the step read it, with its name
    (`model.log_var`, `head.bias`): the core's `variable_values`."""
    return {
        key: event.op_name
        for event in events
        if event.op_type == READ_VARIABLE
        for key in event.output_ids
    }


def made_before(events: Iterable[OpEvent]) -> frozenset[int]:
    """The tensors the step read that none of its ops made and that are no parameter: what
    the step was fed (its batch, or tensors the script made before the step)."""
    produced: set[int] = set()
    fed: set[int] = set()
    for event in events:
        if event.op_type == READ_VARIABLE:
            produced.update(event.output_ids)
            continue
        fed.update(i for i in event.input_ids if i not in produced)
        produced.update(event.output_ids)
    return frozenset(fed)


def _grad_fn(tensor: torch.Tensor):
    """The tensor's autograd node, or None when it has none or torch refuses to give it:
    a view made under `no_grad` and changed in place after (`nn.Embedding(padding_idx=)`
    zeroes such a view of its weight while it is built, in a window recorded from the
    start) raises on `grad_fn`; no gradient flows through it anyway."""
    try:
        return tensor.grad_fn
    except RuntimeError:
        return None


def _dims(args: tuple) -> tuple[int, ...] | None:
    """The dims an op reduces or scatters along: its second argument (`sum(x, [-1])`,
    `index_add_(x, 0, ...)`) as the call passed it; None for a reduction of every
    entry (`sum(x)`, `sum(x, [])`)."""
    dims = args[1] if len(args) > 1 else None
    if isinstance(dims, int) and not isinstance(dims, bool):
        return (dims,)
    if isinstance(dims, list | tuple) and dims and all(isinstance(d, int) for d in dims):
        return tuple(dims)
    return None


def _is_tensor(value: object) -> bool:
    return isinstance(value, torch.Tensor)


def _unwritten(tensor: torch.Tensor) -> TensorStats:
    """The summary of memory no op has written yet: its shape and dtype alone."""
    dtype = str(tensor.dtype).removeprefix("torch.")
    return TensorStats(dtype, tuple(tensor.shape), None, None, 0, 0, 0, tensor.numel())
