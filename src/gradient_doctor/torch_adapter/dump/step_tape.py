"""The seeded rerun's recorder under `--dump`: the op recorder, also keeping what replays
the failing step without the script.

For every aten op it records, it keeps the op's overload (`aten.exp.default`), its
arguments as JSON (`arg_codec`: each tensor as the id of its value), the ids of its
outputs, and its place (module, line, phase, the forward op of a backward op) as its
event has it. A tensor the step reads before any recorded op wrote it (a parameter, the
batch, a constant made before the step) is a leaf: its value then is copied, to be
written to `leaves.safetensors` (`tape_files`), up to `DUMP_LIMIT_BYTES` in all; a
leaf past the limit, of a dtype or layout safetensors cannot hold, or an op whose
arguments cannot be written, is left out and listed. Every value in between is
recomputed by the replay, never stored. Before each random op (one PyTorch tags
`nondeterministic_seeded`: `randn`, `uniform_`, `bernoulli_`, dropout) it keeps its
generator's state, so that the replay draws what the step drew, whatever seeded the
generator in between (a first step's recording starts before the script's
`torch.manual_seed`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

import torch
from torch.utils._pytree import tree_leaves

from gradient_doctor.core.op_trace import OpEvent
from gradient_doctor.torch_adapter.dump.arg_codec import Unencodable, encode, encode_kwargs
from gradient_doctor.torch_adapter.localize.module_scope import ModuleScope
from gradient_doctor.torch_adapter.localize.op_recorder import OpPlace, OpRecorder

# The most tensor bytes one dump holds (256 MiB): past it, leaves are left out and
# listed in the manifest; the replay then stops at the first op that reads one.
DUMP_LIMIT_BYTES = 256 * 2**20
# The dtypes safetensors stores (its own table, by torch dtype).
STORABLE_DTYPES = frozenset(
    {
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
        torch.float8_e4m3fn,
        torch.float8_e5m2,
        torch.complex64,
    }
)
# Namespaces whose ops compute no value of the step: the profiler's `record_function`
# markers (around `optimizer.zero_grad()`), whose handles are script objects.
UNTAPED_NAMESPACES = frozenset({"profiler"})


@dataclass(frozen=True)
class TapedOp:
    """One recorded op, as the replay runs it again.

    Attributes:
        op: its overload, `namespace.name.overload` ("aten.exp.default").
        args, kwargs: its arguments as JSON (`arg_codec`); None when they could not
            be written (`refused` says why).
        outputs: the ids of the tensors it returned, in `tree_leaves` order.
        event: the index of its event in the rerun's recording.
        place: its module, line, phase and forward op, as its event has them.
        refused: why its arguments could not be written, or None.
    """

    op: str
    args: list | None
    kwargs: dict | None
    outputs: tuple[int, ...]
    event: int
    place: OpPlace
    refused: str | None = None


@dataclass(frozen=True)
class Leaf:
    """A tensor the step read before any recorded op wrote it, as it was then.

    Attributes:
        id: the id of its value in the recording.
        name: the parameter's qualified name, or None for any other tensor.
        dtype, shape, stride, device: its layout (`dtype` as "float32").
        value: a copy of it, or None when it is left out (`why` says why).
        why: why it is left out, or None.
    """

    id: int
    name: str | None
    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    device: str
    value: torch.Tensor | None
    why: str | None = None

    @property
    def nbytes(self) -> int:
        return _nbytes(self.shape, self.dtype)


class TapedRecorder(OpRecorder):
    """The op recorder, keeping each op as the replay runs it again, and the leaves.

    Args:
        scope: the module scope followed during the recording.
        parameters: parameter id -> its qualified name.
        limit_bytes: the most leaf bytes kept (`DUMP_LIMIT_BYTES`).
    """

    def __init__(
        self,
        scope: ModuleScope,
        parameters: Mapping[int, str],
        limit_bytes: int = DUMP_LIMIT_BYTES,
    ) -> None:
        super().__init__(scope, parameters)
        self.names = parameters
        self.limit_bytes = limit_bytes
        self.kept_bytes = 0
        self.ops: list[TapedOp] = []
        self.leaves: list[Leaf] = []
        self.checks: list[int] = []  # the ids of the update's losses and gradients
        self.checks_left_out = 0  # those no recorded op made or read
        # The CPU generator as the recording began (what a dump without `draws` replays).
        self.rng = torch.get_rng_state()
        # Index in `ops` of each random op -> its generator's state just before it ran.
        self.draws: dict[int, GeneratorState] = {}
        self._leaf_objects: dict[int, int] = {}  # leaf id -> id() of the tensor read

    def run_op(
        self, func, args: tuple, kwargs: dict, place_of: Callable[[], OpPlace]
    ) -> tuple[object, OpPlace, OpEvent]:
        if func.namespace in UNTAPED_NAMESPACES:
            return super().run_op(func, args, kwargs, place_of)
        refused = None
        try:
            encoded_args = encode(list(args), self._tensor_id)
            encoded_kwargs = encode_kwargs(kwargs, self._tensor_id)
        except Unencodable as error:
            encoded_args = encoded_kwargs = None
            refused = str(error)
        if torch.Tag.nondeterministic_seeded in func.tags:
            self.draws[len(self.ops)] = generator_state(args, kwargs)
        out, place, event = super().run_op(func, args, kwargs, place_of)
        self.ops.append(
            TapedOp(
                op=str(func),
                args=encoded_args,
                kwargs=encoded_kwargs,
                outputs=event.output_ids,
                event=event.index,
                place=place,
                refused=refused,
            )
        )
        return out, place, event

    def mark_bad(self, tensors: Iterable[torch.Tensor]) -> None:
        """Note the update's losses and gradients for the replay's own check, then which
        are not finite now. One no recorded op made or read is left out: the replay
        could only copy its value, never recompute it."""
        tensors = list(tensors)
        for tensor in tensors:
            known = self.current_id(tensor)
            if known is None or not tensor.is_floating_point():
                self.checks_left_out += known is None
                continue
            self.checks.append(known)
        super().mark_bad(tensors)

    def _tensor_id(self, tensor: torch.Tensor) -> int:
        """The id of `tensor`'s value; a tensor first seen is kept as a leaf."""
        known = self.current_id(tensor)
        if known is not None:
            return known
        key = self.key(tensor)
        self.leaves.append(self._leaf(key, tensor))
        self._leaf_objects[key] = id(tensor)
        return key

    def named_leaves(self) -> list[Leaf]:
        """The leaves, each parameter named: one first read before its module was named
        (a first step's recording starts before the model is built) is named now."""
        return [
            leaf
            if leaf.name is not None
            else replace(leaf, name=self.names.get(self._leaf_objects.get(leaf.id, -1)))
            for leaf in self.leaves
        ]

    def _leaf(self, key: int, tensor: torch.Tensor) -> Leaf:
        """The leaf of `tensor`, with a copy of its value unless it is left out."""
        dtype = str(tensor.dtype).removeprefix("torch.")
        shape = tuple(tensor.shape)
        layout = (dtype, shape, _stride(tensor), str(tensor.device))
        name = self.names.get(id(tensor))
        why = _unstorable(tensor)
        nbytes = _nbytes(shape, dtype)
        if why is None and self.kept_bytes + nbytes > self.limit_bytes:
            why = (
                f"the dump's tensors would pass {self.limit_bytes / 2**20:g} MiB "
                f"(this one is {nbytes / 2**20:.1f} MiB)"
            )
        if why is not None:
            return Leaf(key, name, *layout, None, why)
        self.kept_bytes += nbytes
        return Leaf(key, name, *layout, tensor.detach().clone())


@dataclass(frozen=True)
class GeneratorState:
    """The state of the generator a random op draws from, just before it drew.

    Attributes:
        device: "cpu", or the CUDA device ("cuda:0") whose generator the op draws from.
        state: the generator's state (`torch.get_rng_state()`'s bytes).
    """

    device: str
    state: torch.Tensor


def generator_state(args: tuple, kwargs: dict) -> GeneratorState:
    """The state of the generator the op called with `args`, `kwargs` draws from: the
    device of its first tensor argument, or of its `device=` (a factory like `randn`)."""
    device = kwargs.get("device")
    for value in tree_leaves((args, kwargs)):
        if isinstance(value, torch.Tensor):
            device = value.device
            break
    device = torch.device(device if device is not None else "cpu")
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return GeneratorState(f"cuda:{index}", torch.cuda.get_rng_state(index))
    return GeneratorState("cpu", torch.get_rng_state())


def _unstorable(tensor: torch.Tensor) -> str | None:
    """Why safetensors cannot hold `tensor`, or None."""
    if tensor.layout != torch.strided:
        return f"a {str(tensor.layout).removeprefix('torch.')} tensor (only dense ones are kept)"
    if tensor.is_quantized or tensor.dtype not in STORABLE_DTYPES:
        return f"its dtype {tensor.dtype} has no safetensors type"
    if tensor.device.type == "meta":
        return "a meta tensor holds no values"
    return None


def _stride(tensor: torch.Tensor) -> tuple[int, ...]:
    try:
        return tuple(tensor.stride())
    except RuntimeError:  # a layout without strides
        return ()


def _nbytes(shape: tuple[int, ...], dtype: str) -> int:
    count = 1
    for size in shape:
        count *= size
    return count * getattr(torch, dtype).itemsize
