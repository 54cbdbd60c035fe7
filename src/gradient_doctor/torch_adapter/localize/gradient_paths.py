"""Parameters an optimizer holds that got no gradient, and where their path to the loss breaks.

Two parts, a cheap one every update and an expensive one when it trips:

- `CutWatch.observe` compares the number of gradients an update is about to apply with
  the previous update's (the guard counts them anyway): only when it changes, at the
  first update or after, are the optimizer's parameters looked at one by one, and a
  new set of `requires_grad` parameters whose `.grad` is None is noted.
- `find_path_breaks` follows the data flow of a recorded step (`PathRecorder`, the op
  recorder that also notes which outputs carry autograd history and which ops ran
  with gradients off) from each such parameter toward the loss. The path breaks at
  the op whose inputs depend on the parameter but whose outputs feed the loss without
  autograd history (argmax or topk indices, integer and bool casts, `.detach()`, an op
  under `torch.no_grad()`), or where the value left PyTorch as a Python number or list
  (`.item()`, `.tolist()`, `.numpy()`) to come back through `torch.tensor(...)`; or the
  step never read the parameter. The core groups the parameters by break
  (`core.gradient_paths.find_breaks`); the session turns each group into a finding.

`gradient-doctor run` calls the same two: a `CutWatch` at each optimizer step, then the
step run again under a `PathRecorder` in the seeded rerun, whose record comes back as
JSON (`RecordedPaths`) for `breaks_in`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence

import torch
from torch.utils._pytree import tree_leaves

from gradient_doctor.core.findings import SourceLine, TensorStats
from gradient_doctor.core.gradient_paths import Node, PathBreak, find_breaks
from gradient_doctor.core.op_trace import OpEvent
from gradient_doctor.torch_adapter.localize.module_scope import ModuleScope
from gradient_doctor.torch_adapter.localize.op_recorder import READ_VARIABLE, OpRecorder
from gradient_doctor.torch_adapter.localize.source_lines import (
    line_in_gradients_off_block,
    user_line,
)

# The framework the breaks are spelled in (`PathBreak.framework`).
FRAMEWORK = "torch"
# Aten ops that hand a tensor's value to Python as a number (`.item()`, `float(t)`).
_EXITS = frozenset({"_local_scalar_dense", "item"})
# Tensor methods that hand a tensor's values to Python or NumPy without an aten op, by
# the op type their break is named with.
_EXIT_METHODS = {"tolist": "ToList", "numpy": "Numpy"}
# Aten ops that read only their input's shape, dtype and device, never its values.
_SHAPE_ONLY = frozenset(
    {
        "ones_like", "zeros_like", "empty_like", "full_like", "rand_like", "randn_like",
        "randint_like", "new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full",
        "sym_size", "sym_numel", "sym_stride", "size", "stride", "numel", "dim",
    }
)  # fmt: skip
# `.detach()` is PyTorch's stop_gradient (the op recorder keeps aten's own name for it).
_STOP_GRADIENT = frozenset({"detach", "detach_"})
# The aten op a `torch.tensor(...)`/`torch.as_tensor(...)` of Python data runs.
_FRESH = "lift_fresh"


def missing_gradients(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's parameters that require a gradient and have none (`.grad` None).

    Frozen parameters (`requires_grad=False`, a GAN's other half, a target network
    handed to the optimizer by mistake) are not among them: nothing asked for their
    gradient.
    """
    return [
        parameter
        for group in optimizer.param_groups
        for parameter in group["params"]
        if parameter.requires_grad and parameter.grad is None
    ]


def trainable_count(optimizer: torch.optim.Optimizer) -> int:
    """How many of the optimizer's parameters require a gradient."""
    return sum(p.requires_grad for group in optimizer.param_groups for p in group["params"])


# A part of an optimizer's parameters is reported without a gradient only once the
# same part went without one for this many updates in a row: a mixture of experts
# leaves an expert that no token was routed to without a gradient for a step, and
# trains it at the next; a path that is cut stays cut. A part none of which ever had a
# gradient (a head never called, a path cut from the start) is reported sooner, after
# `NEW_CUT_UPDATES`; one that trained before (an expert the router stopped choosing, a
# path cut halfway through training), after `PERSISTENT_UPDATES`.
NEW_CUT_UPDATES = 3
PERSISTENT_UPDATES = 10


@dataclasses.dataclass
class _Streak:
    """Parameters of one optimizer left without a gradient at consecutive updates."""

    key: frozenset[int]
    cut: list[torch.Tensor]
    needed: int
    updates: int = 0


class CutWatch:
    """Notes, per optimizer, a set of parameters left without a gradient: every one of
    its parameters at once, or a part of them at several updates in a row
    (`NEW_CUT_UPDATES`, or `PERSISTENT_UPDATES` for a part that had gradients before).

    `observe` costs a dictionary look-up while the number of gradients an optimizer
    applies stays the same and no part is missing; only a change (and the first
    update) looks at each parameter, and a missing part is looked at each update until
    it is noted or gets its gradients. A set already noted is not noted again.
    """

    def __init__(self) -> None:
        self._present: dict[int, int] = {}  # id(optimizer) -> gradients at its last update
        self._streaks: dict[int, _Streak] = {}  # id(optimizer) -> the part missing now
        self._trained: set[int] = set()  # ids of parameters seen with a gradient
        self._noted: set[frozenset[int]] = set()
        self._found: list[tuple[torch.optim.Optimizer, list[torch.Tensor], int]] = []

    def observe(self, optimizer: torch.optim.Optimizer, present: int) -> None:
        """Take in an update of `optimizer` about to apply `present` gradients."""
        key = id(optimizer)
        streak = self._streaks.get(key)
        unchanged = self._present.get(key) == present
        if unchanged and streak is None:
            return
        if not unchanged or any(p.grad is not None for p in streak.cut):  # another set
            self._present[key] = present
            cut = missing_gradients(optimizer)
            ids = frozenset(id(p) for p in cut)
            self._trained.update(
                id(p)
                for group in optimizer.param_groups
                for p in group["params"]
                if p.grad is not None
            )
            if not cut or ids in self._noted:
                self._streaks.pop(key, None)
                return
            if streak is None or streak.key != ids:
                trained = not ids.isdisjoint(self._trained)
                needed = PERSISTENT_UPDATES if trained else NEW_CUT_UPDATES
                streak = self._streaks[key] = _Streak(ids, cut, needed)
        streak.updates += 1
        if streak.updates >= streak.needed or len(streak.cut) == trainable_count(optimizer):
            self._noted.add(streak.key)
            self._found.append((optimizer, streak.cut, streak.updates))
            del self._streaks[key]

    def take(self) -> list[tuple[torch.optim.Optimizer, list[torch.Tensor], int]]:
        """The (optimizer, parameters without a gradient, for how many of its updates in a
        row they had none) noted since the last call."""
        found, self._found = self._found, []
        return found


@dataclasses.dataclass(frozen=True)
class RecordedPaths:
    """What a `PathRecorder` recorded, as plain data (the attributes it has itself).

    Attributes:
        events: the recorded ops.
        stats: each tensor value's summary, by id.
        grad_enabled: event index -> gradients were on while it ran.
        carries: event index -> whether each output carries autograd history.
        exits: `(ops recorded before it, method, id of the tensor read, line)` of each
            `.tolist()` or `.numpy()` call.
        off_at: event index -> for an op gradients were off for, the user's line inside
            the `with torch.no_grad():` block that ran it.
    """

    events: Sequence[OpEvent]
    stats: Mapping[int, TensorStats]
    grad_enabled: Mapping[int, bool]
    carries: Mapping[int, tuple[bool, ...]]
    exits: Sequence[tuple[int, str, int, SourceLine | None]]
    off_at: Mapping[int, SourceLine] = dataclasses.field(default_factory=dict)


class PathRecorder(OpRecorder):
    """The op recorder, noting also what autograd made of each op.

    For each recorded op: whether gradients were on while it ran (not under
    `torch.no_grad()` or `torch.inference_mode()`), and which of its outputs carry
    autograd history (`requires_grad`), read once autograd has wrapped them (at the
    next op, or when the recorder exits). Tensors handed to Python through
    `.tolist()` or `.numpy()`, which run no aten op, are noted with the user's line.
    """

    def __init__(self, scope: ModuleScope, parameters: Mapping[int, str]) -> None:
        super().__init__(scope, parameters)
        self.parameter_names = parameters
        self.grad_enabled: dict[int, bool] = {}  # event index -> gradients were on
        # event index -> for an op gradients were off for, the user's line inside the
        # `with torch.no_grad():` block that ran it (`line_in_gradients_off_block`)
        self.off_at: dict[int, SourceLine] = {}
        self.carries: dict[int, tuple[bool, ...]] = {}  # event index -> per output
        # (ops recorded before it, the method, the id of the tensor it read, the line)
        self.exits: list[tuple[int, str, int, SourceLine | None]] = []
        self._unread: list[tuple[int, list[torch.Tensor]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self._read_history()
        if self._paused:
            return super().__torch_dispatch__(func, types, args, kwargs)
        enabled = torch.is_grad_enabled()
        count = len(self.events)
        out = super().__torch_dispatch__(func, types, args, kwargs)
        index = len(self.events) - 1  # a parameter's read event may come first
        if index >= count:
            self.grad_enabled[index] = enabled
            if not enabled:
                inside = line_in_gradients_off_block()
                if inside is not None:
                    self.off_at[index] = inside
            self._unread.append((index, [t for t in tree_leaves(out) if _is_tensor(t)]))
        return out

    def __exit__(self, *exc):
        self._read_history()
        return super().__exit__(*exc)

    def _read_history(self) -> None:
        for index, outputs in self._unread:
            self.carries[index] = tuple(t.requires_grad for t in outputs)
        self._unread.clear()

    @contextlib.contextmanager
    def exits_noted(self) -> Iterator[None]:
        """Note each `.tolist()` and `.numpy()` call while the block runs (methods patched)."""
        originals = {name: getattr(torch.Tensor, name) for name in _EXIT_METHODS}

        def noting(name):
            original = originals[name]

            def method(tensor, *args, **kwargs):
                if not self._paused:
                    self.exits.append((len(self.events), name, self.key(tensor), user_line()))
                return original(tensor, *args, **kwargs)

            return method

        for name in _EXIT_METHODS:
            setattr(torch.Tensor, name, noting(name))
        try:
            yield
        finally:
            for name, original in originals.items():
                setattr(torch.Tensor, name, original)


def find_path_breaks(
    recorder: PathRecorder,
    parameters: Sequence[torch.Tensor],
    losses: Sequence[torch.Tensor],
) -> list[PathBreak]:
    """Where the paths from `losses` to `parameters` break, in a recorded step.

    Args:
        recorder: the `PathRecorder` the step ran under (forward, backward, update).
        parameters: the parameters without a gradient (named as the recorder names
            them).
        losses: the tensors `backward()` was called on in the update that missed
            their gradients (the recorder's ids of them must exist: they are
            outputs of its recorded ops).

    Returns:
        One `PathBreak` per group of parameters cut at the same place, `framework`
        "torch"; `never_read` for those the step never read.
    """
    names = [recorder.parameter_names.get(id(p), f"param{i}") for i, p in enumerate(parameters)]
    loss_ids = tuple(recorder.key(t) for t in losses if _is_tensor(t))
    return breaks_in(recorder, names, loss_ids)


def breaks_in(
    recorded: RecordedPaths, names: Sequence[str], loss_ids: Sequence[int]
) -> list[PathBreak]:
    """`find_path_breaks` on what a `PathRecorder` recorded, by name and id: the form the
    seeded rerun of `gradient-doctor run` hands back as JSON (`step_events`).

    Args:
        recorded: the recorder, or its record read back (`RecordedPaths`).
        names: the parameters without a gradient, as the recorder named them.
        loss_ids: the recorder's ids of the tensors `backward()` was called on.
    """
    nodes = _nodes(recorded)
    reads = {
        event.op_name: event.output_ids
        for event in recorded.events
        if event.op_type == READ_VARIABLE and event.phase == "forward"
    }
    variable_reads = {name: reads.get(name, ()) for name in names}
    breaks = find_breaks(nodes, tuple(loss_ids), variable_reads, _fresh_values(recorded, nodes))
    return [dataclasses.replace(b, framework=FRAMEWORK) for b in _by_line(breaks)]


def _by_line(breaks: Sequence[PathBreak]) -> list[PathBreak]:
    """Breaks of one kind on one user's line merged (a weight's `t` and its `addmm` under
    the same `torch.no_grad()` line are one break), at the latest of their ops."""
    merged: dict[tuple, PathBreak] = {}
    for path_break in breaks:
        node = path_break.node
        source = node.source if node is not None else None
        where = (source.file, source.line) if source is not None else id(path_break)
        key = (path_break.kind, where)
        known = merged.get(key)
        if known is None:
            merged[key] = path_break
            continue
        latest = max((known.node, node), key=lambda n: n.index)
        merged[key] = dataclasses.replace(
            known, node=latest, variables=known.variables + path_break.variables
        )
    return list(merged.values())


def _nodes(recorder: RecordedPaths) -> list[Node]:
    """The step's forward ops as the core's dataflow nodes, exits included."""
    nodes = []
    for event in recorder.events:
        if event.phase != "forward":
            continue
        aten = event.op_name.rpartition("aten.")[2]
        recorded = recorder.grad_enabled.get(event.index, True)
        carries = recorder.carries.get(event.index, (True,) * len(event.output_ids))
        floating = any(s.dtype.startswith(("float", "complex", "bfloat")) for s in event.outputs)
        exit_op = aten in _EXITS
        nodes.append(
            Node(
                index=2 * event.index + 1,
                op_type="StopGradient" if aten in _STOP_GRADIENT else event.op_type,
                input_ids=event.input_ids,
                output_ids=event.output_ids,
                source=event.source if recorded else recorder.off_at.get(event.index, event.source),
                differentiable=event.op_type == READ_VARIABLE
                or (any(carries) if recorded else floating),
                recorded=recorded,
                structural=aten in _SHAPE_ONLY,
                output_shapes=tuple(s.shape for s in event.outputs),
                integer_outputs=frozenset(
                    key for key, carried in zip(event.output_ids, carries) if not carried
                ),
                leaves_framework=exit_op,
            )
        )
    for before, method, key, source in recorder.exits:
        stats = recorder.stats.get(key)
        nodes.append(
            Node(
                index=2 * before,  # between the ops recorded before and after the call
                op_type=_EXIT_METHODS[method],
                input_ids=(key,),
                output_ids=(),
                source=source,
                differentiable=False,
                output_shapes=(stats.shape if stats is not None else None,),
                leaves_framework=True,
            )
        )
    nodes.sort(key=lambda node: node.index)
    return nodes


def _fresh_values(recorder: RecordedPaths, nodes: Sequence[Node]) -> dict[int, tuple]:
    """Values made from Python data by `torch.tensor(...)` after a value left for Python:
    where a round trip through `.item()`, `.tolist()` or `.numpy()` may have come back."""
    exits = [node.index for node in nodes if node.leaves_framework]
    if not exits:
        return {}
    first = min(exits)
    fresh = {}
    for node in nodes:
        if node.index > first and node.op_type == "LiftFresh":
            for key in node.input_ids:
                stats = recorder.stats.get(key)
                fresh[key] = stats.shape if stats is not None else None
    return fresh


def _is_tensor(value: object) -> bool:
    return isinstance(value, torch.Tensor)
