"""Find non-finite values in a step's input batch: which tensor, which rows, which features."""

from __future__ import annotations

import numpy as np

from gradient_doctor.core.evidence import BadInput, TargetScale

MAX_LISTED = 10
# Whole numbers below this are taken for class ids stored as floats, not regression targets.
CLASS_IDS_BELOW = 1e4


def named_leaves(value, name: str) -> list[tuple[str, object]]:
    """Flatten nested tuples, lists and dicts into (readable path, leaf) pairs."""
    if isinstance(value, dict):
        return [pair for key in value for pair in named_leaves(value[key], f"{name}[{key!r}]")]
    if isinstance(value, list | tuple):
        return [pair for i, item in enumerate(value) for pair in named_leaves(item, f"{name}[{i}]")]
    return [(name, value)]


def scan(named: list[tuple[str, object]]) -> tuple[BadInput, ...]:
    """Report every floating tensor among `named` that holds NaN or Inf."""
    found = []
    for name, tensor in named:
        if not _is_floating(tensor):
            continue
        array = np.asarray(tensor).astype(np.float64)
        bad = ~np.isfinite(array)
        if not bad.any():
            continue
        rows = np.nonzero(bad.reshape(bad.shape[0], -1).any(axis=1))[0] if array.ndim else []
        columns = (
            np.nonzero(bad.reshape(-1, bad.shape[-1]).any(axis=0))[0] if array.ndim > 1 else []
        )
        found.append(
            BadInput(
                tensor=name,
                shape=tuple(int(d) for d in array.shape),
                nan=int(np.isnan(array).sum()),
                inf=int(np.isinf(array).sum()),
                rows=tuple(int(r) for r in rows[:MAX_LISTED]),
                columns=tuple(int(c) for c in columns[:MAX_LISTED]),
            )
        )
    return tuple(found)


def input_scale(named: list[tuple[str, object]]) -> tuple[str, float] | None:
    """(name, largest finite magnitude) of the step's first floating-point input, or None.

    The first input is the features in `fit`'s `(x, y)` and in most custom steps
    (`train_step(x, y)`); the labels' scale is a matter for the loss.
    """
    for name, tensor in named:
        if not _is_floating(tensor):
            continue
        array = np.abs(np.asarray(tensor, dtype=np.float64))
        finite = array[np.isfinite(array)]
        return (name, float(finite.max())) if finite.size else None
    return None


def target_scale(named: list[tuple[str, object]]) -> TargetScale | None:
    """The scale of the step's regression targets, or None when there are none to tell.

    The targets are the labels of `fit`'s `(x, y)` batch (`y`, or one leaf of it), or,
    in a custom step, its last floating-point input when it has more than one (the
    first is the features, `train_step(x, y)`); sample weights are not targets. Of
    several, the one of the largest magnitude is taken. Whole numbers below
    `CLASS_IDS_BELOW` are class ids stored as floats, not values to regress on.
    """
    floating = [(name, tensor) for name, tensor in named if _is_floating(tensor)]
    labels = [pair for pair in floating if pair[0] == "y" or pair[0].startswith("y[")]
    candidates = labels or [pair for pair in floating[1:] if pair[0] != "sample_weight"][-1:]
    best = None
    for name, tensor in candidates:
        values = np.asarray(tensor, dtype=np.float64)
        values = values[np.isfinite(values)]
        if not values.size:
            continue
        largest = float(np.abs(values).max())
        if largest < CLASS_IDS_BELOW and np.all(values == np.round(values)):
            continue
        if best is None or largest > best.largest:
            best = TargetScale(f"`{name}`", largest, float(values.mean()), float(values.std()))
    return best


def _is_floating(tensor) -> bool:
    dtype = getattr(tensor, "dtype", None)
    return dtype is not None and getattr(dtype, "is_floating", False)


def keras_batch_names(data) -> list[tuple[str, object]]:
    """Name the parts of a Keras `(x, y, sample_weight)` batch as a user would."""
    if isinstance(data, tuple) and 1 <= len(data) <= 3:
        names = ("x", "y", "sample_weight")
        return [pair for part, n in zip(data, names) for pair in named_leaves(part, n)]
    return named_leaves(data, "x")
