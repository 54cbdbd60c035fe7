"""Summarise a concrete tensor's values into framework-neutral `TensorStats`."""

from __future__ import annotations

import numpy as np

from gradient_doctor.core.findings import TensorStats

SAMPLE_SIZE = 6


def _as_numpy(tensor) -> np.ndarray | None:
    values = getattr(tensor, "values", None)  # IndexedSlices carry their values
    if values is not None and hasattr(tensor, "indices"):
        tensor = values
    try:
        array = np.asarray(tensor)
    except Exception:  # resource handles, variants, strings: nothing to summarise
        return None
    if array.dtype.kind not in "fc" and str(array.dtype) != "bfloat16":
        return array if array.dtype.kind in "iub" else None
    return array


def dtype_name(tensor) -> str:
    """The dtype of `tensor` as a plain name such as "float32"."""
    dtype = getattr(tensor, "dtype", None)
    return getattr(dtype, "name", str(dtype))


def summarize(tensor) -> TensorStats | None:
    """Count NaN/Inf/zeros and take the finite range; None for non-numeric tensors."""
    array = _as_numpy(tensor)
    if array is None:
        return None
    shape = tuple(int(d) for d in array.shape)
    name = dtype_name(tensor)
    if array.dtype.kind in "iub":
        flat = array.astype(np.float64).ravel()
        nan = pos_inf = neg_inf = 0
        finite = flat
    else:
        flat = array.astype(np.float64).ravel()
        nan = int(np.isnan(flat).sum())
        pos_inf = int(np.isposinf(flat).sum())
        neg_inf = int(np.isneginf(flat).sum())
        finite = flat[np.isfinite(flat)] if (nan or pos_inf or neg_inf) else flat
    has_values = finite.size > 0
    return TensorStats(
        dtype=name,
        shape=shape,
        min=float(finite.min()) if has_values else None,
        max=float(finite.max()) if has_values else None,
        nan=nan,
        inf=pos_inf + neg_inf,
        zeros=int((flat == 0).sum()),
        size=int(flat.size),
        pos_inf=pos_inf,
        neg_inf=neg_inf,
        min_abs=float(np.abs(finite).min()) if has_values else None,
    )


def sample_values(tensor) -> tuple[float, ...]:
    """A few values worth showing: the largest magnitudes first, non-finite included."""
    array = _as_numpy(tensor)
    if array is None or array.size == 0:
        return ()
    flat = array.astype(np.float64).ravel()
    order = np.argsort(-np.nan_to_num(np.abs(flat), nan=np.inf))
    return tuple(float(v) for v in flat[order[:SAMPLE_SIZE]])
