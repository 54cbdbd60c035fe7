"""Find the `__getitem__` of the user's own Dataset that wrote a batch's non-finite values.

A batch that already holds NaN says only that the data did. Often the data is made by
the user's own `torch.utils.data.Dataset`: a `__getitem__` that standardises each
sample by its own standard deviation, or takes the log of a count, writes NaN or -inf
for the sample where that is 0. For each map-style dataset in reach whose
`__getitem__` the user wrote (the datasets and the loaders' datasets the user's frames
hold; a `TensorDataset` only indexes what it was given), its items are read in order
(within `SCAN_SECONDS`), and the first item holding a non-finite value is read again
under the op recorder: the first op that wrote a non-finite value from finite inputs
is the origin, explained by the rules as a step's op is.
"""

from __future__ import annotations

import sys
import time

import torch
from torch.utils.data import ConcatDataset, DataLoader, Dataset, IterableDataset, Subset

from gradient_doctor.core.evidence import BadItem, PipelineOrigin
from gradient_doctor.core.origin_search import trace_evidence
from gradient_doctor.core.source_frames import is_user_file, user_frame_values
from gradient_doctor.torch_adapter.localize.module_scope import ModuleScope
from gradient_doctor.torch_adapter.localize.op_recorder import (
    READ_VARIABLE,
    OpRecorder,
    made_before,
)
from gradient_doctor.torch_adapter.localize.reductions import TorchReductions
from gradient_doctor.torch_adapter.step import rng_state

# How long the items of the datasets in reach are read, at most, looking for a bad one.
SCAN_SECONDS = 10.0


def pipeline_origin(datasets: list) -> tuple[PipelineOrigin | None, BadItem | None]:
    """The first dataset of `datasets` whose `__getitem__` writes a non-finite value
    from finite inputs, replayed on that item; else, the first item holding one that no
    torch op of it made (the source data itself held the values, or the item is made
    without torch ops: a NumPy standardisation), as a `BadItem`; Nones when no item in
    reach holds one."""
    deadline = time.monotonic() + SCAN_SECONDS
    first: BadItem | None = None
    for dataset in datasets:
        index = _first_nonfinite(dataset, deadline)
        if index is not None:
            origin = _replayed(dataset, index)
            if origin is not None:
                return origin, None
            first = first or _bad_item(dataset, index)
    return None, first


def _bad_item(dataset, index: int) -> BadItem | None:
    """Item `index` of `dataset` as a `BadItem`: which of its tensors holds what."""
    saved = rng_state.save()
    try:
        tensors = _tensors(dataset[index])
    except Exception:
        return None
    finally:
        rng_state.restore(saved)
    for number, tensor in enumerate(tensors):
        if tensor.is_floating_point() and not _finite(tensor):
            flat = tensor.detach().reshape(-1)
            nan, inf = int(flat.isnan().sum()), int(flat.isinf().sum())
            counts = " and ".join(
                p for p in (f"{nan} NaN" * bool(nan), f"{inf} Inf" * bool(inf)) if p
            )
            positions = [int(i) for i in (~flat.isfinite()).nonzero().flatten()[:5]]
            shape = "x".join(str(size) for size in tensor.shape) or "a scalar"
            where = (
                f"its tensor {number + 1} of {len(tensors)} (shape {shape}) holds {counts}, "
                f"at flat position{'s' if len(positions) > 1 else ''} "
                f"{', '.join(map(str, positions))}"
            )
            return BadItem(type(dataset).__name__, index, where)
    return None


def datasets_in_reach() -> list:
    """The user's own map-style datasets the user's frames on the stack hold, directly,
    as a `DataLoader`'s dataset, or inside a `Subset` (`random_split`'s) or a
    `ConcatDataset` (innermost frame first, each once)."""
    found = []
    for value in user_frame_values(sys._getframe(1)):
        dataset = value.dataset if isinstance(value, DataLoader) else value
        for own in _unwrapped(dataset):
            if _users_own(own) and all(own is not seen for seen in found):
                found.append(own)
    return found


def _unwrapped(dataset) -> list:
    """The datasets inside torch's wrappers (a `Subset`'s, a `ConcatDataset`'s parts), or
    `dataset` itself."""
    if isinstance(dataset, Subset):
        return _unwrapped(dataset.dataset)
    if isinstance(dataset, ConcatDataset):
        return [inner for part in dataset.datasets for inner in _unwrapped(part)]
    return [dataset]


def _users_own(dataset) -> bool:
    """A map-style dataset whose `__getitem__` is defined in one of the user's files."""
    if not isinstance(dataset, Dataset) or isinstance(dataset, IterableDataset):
        return False
    getitem = getattr(type(dataset), "__getitem__", None)
    code = getattr(getitem, "__code__", None)
    return code is not None and is_user_file(code.co_filename) and hasattr(dataset, "__len__")


def _first_nonfinite(dataset, deadline: float) -> int | None:
    """The index of the first item holding a non-finite value, read before `deadline`;
    the random generators are put back after (an augmentation draws from them)."""
    saved = rng_state.save()
    try:
        for index in range(len(dataset)):
            if time.monotonic() > deadline:
                return None
            if not _finite(dataset[index]):
                return index
    except Exception:  # the user's dataset raised on its own: nothing to say here
        return None
    finally:
        rng_state.restore(saved)
    return None


def _replayed(dataset, index: int) -> PipelineOrigin | None:
    """Item `index` read again under the op recorder, walked from its non-finite
    tensors to the first op that wrote one; None when no op of it did."""
    recorder = OpRecorder(ModuleScope({}), {})
    saved = rng_state.save()
    try:
        with recorder:
            item = dataset[index]
        recorder.mark_bad(t for t in _tensors(item) if not _finite(t))
    except Exception:
        return None
    finally:
        rng_state.restore(saved)
    events = list(recorder.events)
    traced = trace_evidence(
        events,
        list(recorder.bad_ids),
        None,
        data_ids=made_before(events),
        weight_reads=frozenset({READ_VARIABLE}),
        stats=recorder.stats,
        reductions=TorchReductions(),
    )
    if traced.evidence.origin is None:
        return None
    name = type(dataset).__name__
    element = f"item {index} of the dataset (the first that holds a non-finite value)"
    return PipelineOrigin(f"`{name}.__getitem__`", element, traced.evidence)


def _tensors(item) -> list[torch.Tensor]:
    """The tensors of an item (a tensor, a tuple or list of them, a dict of them)."""
    if isinstance(item, torch.Tensor):
        return [item]
    if isinstance(item, dict):
        item = list(item.values())
    if isinstance(item, list | tuple):
        return [t for part in item for t in _tensors(part)]
    return []


def _finite(item) -> bool:
    """Whether every floating-point tensor of an item is finite."""
    return all(bool(torch.isfinite(t).all()) for t in _tensors(item) if torch.is_floating_point(t))
