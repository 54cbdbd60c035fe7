"""`gradient-doctor replay DIR` for a PyTorch dump: the failing step's aten ops run again
one by one, without the script, and diagnosed.

Each recorded op runs again, in order, on the values the replayed ops before it made
(the leaves from `leaves.safetensors` to start), on the device it was dumped from
where this machine has it and on the CPU otherwise, with the CPU generator put back
to its state before each random op (random ops draw what they drew; a dump that kept
only the state as the step began replays from that). Each op is recorded
by the same `OpRecorder` code as the run's, from the replay's own values, with the
place the run noted (module, line, phase, forward op); the replayed losses and
gradients are checked, and the events walked to the origin as the run's are
(`recorded_evidence`), then diagnosed by the same `diagnosed`. A value the dump left
out stops the replay at the first op that reads it, and the replay says so.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import torch
from torch.utils._pytree import tree_leaves

from gradient_doctor.core.crash_dump import DumpReplay, restored_context
from gradient_doctor.core.dump_folder import DumpError, check_files, read_manifest
from gradient_doctor.core.pipeline import diagnosed
from gradient_doctor.torch_adapter.dump.arg_codec import MissingValue, decode, decode_kwargs
from gradient_doctor.torch_adapter.dump.step_tape import GeneratorState, Leaf
from gradient_doctor.torch_adapter.dump.tape_files import LEAVES, OPS, Tape, read_tape
from gradient_doctor.torch_adapter.localize.event_evidence import recorded_evidence
from gradient_doctor.torch_adapter.localize.module_scope import ModuleScope
from gradient_doctor.torch_adapter.localize.op_recorder import OpRecorder


def replay_dump(directory: str | os.PathLike[str]) -> DumpReplay:
    """Replay the PyTorch dump in `directory` and diagnose the step. The folder is only read.

    Raises:
        DumpError: the dump is missing, incomplete, corrupted, or of another version.
    """
    folder = Path(directory)
    manifest = read_manifest(folder)
    check_files(folder, manifest, (OPS, LEAVES))
    tape = read_tape(folder)
    values = {leaf.id: _placed(leaf, folder) for leaf in tape.leaves if leaf.value is not None}
    missing = {leaf.id: leaf.why or "left out" for leaf in tape.leaves if leaf.value is None}
    recorder = OpRecorder(
        ModuleScope({}),
        {id(values[leaf.id]): leaf.name for leaf in tape.leaves if leaf.name and leaf.id in values},
    )
    with torch.random.fork_rng(devices=_cuda_devices(tape)), torch.no_grad():
        torch.set_rng_state(tape.rng)
        stopped = _run(tape, values, missing, recorder)
    recorder.mark_bad([values[key] for key in tape.checks if key in values])
    history, setup = restored_context(manifest)
    step = manifest.get("step")
    evidence = recorded_evidence(
        recorder.events, recorder.bad_ids, recorder.stats, step, history, setup
    )
    return DumpReplay(manifest, diagnosed(evidence), bool(recorder.bad_ids), stopped)


def _run(
    tape: Tape, values: dict[int, torch.Tensor], missing: dict[int, str], recorder: OpRecorder
) -> str | None:
    """Run the tape's ops in order under `recorder`, each output put in `values` by its
    id; why the replay stopped before the last op, or None."""
    replayed_index: dict[int, int] = {}  # the run's event index -> the replay's

    def tensor_of(key: int) -> torch.Tensor:
        if key in values:
            return values[key]
        raise MissingValue(missing.get(key, f"no op of the dump made tensor {key}"))

    for number, op in enumerate(tape.ops):
        where = f"op {number + 1} of {len(tape.ops)} ({op.op})"
        if op.refused is not None:  # what reads its outputs stops the replay, when reached
            missing.update((key, f"{where} was not dumped: {op.refused}") for key in op.outputs)
            continue
        try:
            func = _overload(op.op)
            args = decode(op.args, tensor_of, _device)
            kwargs = decode_kwargs(op.kwargs, tensor_of, _device)
        except MissingValue as error:
            return f"{where} reads a tensor the dump does not hold: {error}"
        except (AttributeError, ValueError) as error:
            return f"{where} cannot run with PyTorch {torch.__version__}: {error}"
        draw = tape.draws.get(number)
        if draw is not None:
            _restore_generator(draw)
        # The forward op of a backward op, by its index among the replay's own events.
        place = replace(op.place, forward_index=replayed_index.get(op.place.forward_index))
        try:
            out, _, event = recorder.run_op(func, tuple(args), kwargs, lambda p=place: p)
        except Exception as error:  # the op as PyTorch runs it here: said, not raised
            return f"{where} raised {type(error).__name__} when run again: {_first_line(error)}"
        replayed_index[op.event] = event.index
        outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        values.update(zip(op.outputs, outputs))
    return None


def _cuda_devices(tape: Tape) -> list[int]:
    """The CUDA devices whose generators the replay sets (restored after it)."""
    devices = {_device(draw.device) for draw in tape.draws.values()}
    return sorted(d.index for d in devices if d.type == "cuda")


def _restore_generator(draw: GeneratorState) -> None:
    """Put the generator a random op draws from back to its state before the step's draw
    (a CUDA generator only where this machine has that device: elsewhere the op runs on
    the CPU, whose generator then draws differently, and the replay says what it found)."""
    if draw.device == "cpu":
        torch.set_rng_state(draw.state)
        return
    device = _device(draw.device)
    if device.type == "cuda":
        torch.cuda.set_rng_state(draw.state, device)


def _overload(name: str):
    """The op `name` ("aten.exp.default") names, looked up among torch's registered ops."""
    namespace, packet, overload = name.split(".")
    found = getattr(getattr(getattr(torch.ops, namespace), packet), overload)
    if not isinstance(found, torch._ops.OpOverload):
        raise ValueError(f"{name} is no operator")
    return found


def _device(name: str) -> torch.device:
    """The dumped device where this machine has it, the CPU otherwise."""
    device = torch.device(name)
    if device.type == "cpu":
        return device
    module = getattr(torch, device.type, None)
    available = getattr(module, "is_available", None)
    return device if available is not None and available() else torch.device("cpu")


def _placed(leaf: Leaf, folder: Path) -> torch.Tensor:
    """The leaf's value on its device, with its strides where they can be rebuilt.

    Raises:
        DumpError: the stored tensor is not the dtype or shape `ops.json` says.
    """
    value = leaf.value
    if str(value.dtype).removeprefix("torch.") != leaf.dtype or tuple(value.shape) != leaf.shape:
        raise DumpError(
            f"cannot replay {str(folder)!r}: {LEAVES} holds leaf {leaf.id} as {value.dtype} "
            f"{tuple(value.shape)}, where {OPS} says {leaf.dtype} {leaf.shape}. Copy the dump "
            "again from where it was written, or dump the run again."
        )
    value = value.to(_device(leaf.device))
    if not leaf.stride or tuple(value.stride()) == leaf.stride:
        return value
    try:
        strided = torch.empty_strided(
            leaf.shape, leaf.stride, dtype=value.dtype, device=value.device
        )
        strided.copy_(value)
        return strided
    except RuntimeError:  # overlapping strides (an expanded tensor): kept contiguous
        return value


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
