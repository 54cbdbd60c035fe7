"""Where fix trials find batches after the failing one: the training data of `fit`, read anew.

A trial that repeats the failing batch shows whether the remedy survives it, but a
loss on one batch always falls. When `fit` was given data that can be read again
without touching the user's own iterators (NumPy arrays, tensors, a `tf.data`
dataset), a trial goes on with that data from its start. Python generators and
`PyDataset`s are not read: that would consume or reorder the user's data.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.knowledge.rewrites.data import STATISTICS_DTYPE
from gradient_doctor.core.knowledge.rewrites.finite_rows import PARTS, FitRows
from gradient_doctor.core.knowledge.source.syntax_edit import (
    argument,
    fit_call,
    parse,
)
from gradient_doctor.core.patches import read_lines
from gradient_doctor.core.source_frames import display_root
from gradient_doctor.tf_adapter._tf_internals import get_data_adapter

DEFAULT_BATCH_SIZE = 32  # Keras's own default for `fit`


def _is_array_tree(value) -> bool:
    if isinstance(value, np.ndarray | tf.Tensor):
        return True
    if isinstance(value, list | tuple) and value:
        return all(_is_array_tree(v) for v in value)
    if isinstance(value, dict) and value:
        return all(_is_array_tree(v) for v in value.values())
    return False


@dataclass(frozen=True)
class FitCall:
    """One call of `fit`: the user's line that made it and the data it was given.

    Attributes:
        source: the user's `fit(...)` line, or None when not known.
        x, y, sample_weight, batch_size: as given to `fit`.
        callbacks: the callbacks the script passed to `fit` (the doctor's not among them).
    """

    source: SourceLine | None
    x: object
    y: object = None
    sample_weight: object = None
    batch_size: int | None = None
    callbacks: tuple = ()

    def batches(self) -> Callable[[], Iterator] | None:
        """Fresh iterators over the call's batches, or None (see `fit_batches`)."""
        return fit_batches(self.x, self.y, self.sample_weight, self.batch_size)

    def standardisable(self, part: str = "x") -> bool:
        """Whether the `fit` line's rewrite can standardise `part` (`x`, or the targets
        `y`) as written: one NumPy array of floats (a `tf.data.Dataset` or a dict has no
        `.mean(axis=0)`)."""
        value = self.x if part == "x" else self.y
        return isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating)

    def standardised_batches(
        self, epsilon: float, part: str = "x"
    ) -> Callable[[], Iterator] | None:
        """The same batches with `part` (`x`, or the targets `y`) standardised over the
        whole data, column by column, as `(v - v.mean(axis=0, dtype="float64")) /
        (v.std(axis=0, dtype="float64") + epsilon)` computes it (the `normalize_input` and
        `normalize_target` patches of the fit line; `fit(x, x)` has both standardised);
        None unless it is one NumPy array of floats."""
        if not self.standardisable(part):
            return None
        wide = STATISTICS_DTYPE
        value = self.x if part == "x" else self.y
        scaled = (value - value.mean(axis=0, dtype=wide)) / (
            value.std(axis=0, dtype=wide) + epsilon
        )
        if part == "x":  # an autoencoder's `fit(x, x)`: its targets are its inputs
            x, y = scaled, scaled if self.y is self.x else self.y
        else:
            x, y = self.x, scaled
        return fit_batches(x, y, self.sample_weight, self.batch_size)

    def argument_text(self, part: str) -> str | None:
        """How the user's `fit` line writes `part` of its data (`mnist_digits` for `x`),
        when it is a plain name or attribute; else None."""
        lines = None
        if self.source is not None:
            lines = read_lines(os.path.join(display_root(), self.source.file))
        tree = parse(lines)[0] if lines is not None else None
        if tree is None:
            return None
        fit = fit_call(tree, self.source)
        value = argument(fit, PARTS[part], part) if fit is not None else None
        return ast.unparse(value) if isinstance(value, ast.Name | ast.Attribute) else None

    def scaled_batches(self) -> Callable[[], Iterator] | None:
        """The same batches with the features divided by their largest magnitude, as
        `x / abs(x).max()` computes it (the `normalize_input` patch of a `fit(x)` given
        no targets); None unless they are one NumPy array of floats."""
        if not self.standardisable("x"):
            return None
        return fit_batches(self.x / abs(self.x).max(), self.y, self.sample_weight, self.batch_size)

    def _arrays(self) -> dict[str, np.ndarray]:
        """The parts of the data given, by part in `PARTS` order, when each is a NumPy
        array of numbers and they all have one length; else empty (a row of a dataset,
        a dict or a list cannot be dropped by indexing)."""
        given = {part: value for part in PARTS if (value := getattr(self, part)) is not None}
        arrays = {
            part: value
            for part, value in given.items()
            if isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.number)
        }
        if len(arrays) != len(given) or len({len(value) for value in arrays.values()}) != 1:
            return {}
        return arrays

    def _finite_mask(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        """The rows finite in every array, as the `finite_rows` patch computes them."""
        masks = [np.isfinite(v).reshape(len(v), -1).all(axis=1) for v in arrays.values()]
        return np.logical_and.reduce(masks)

    def finite_rows(self, parts: set[str]) -> FitRows | None:
        """The site of the `finite_rows` patch when the rows of the arrays `fit` was given
        that hold NaN or Inf hold them in `parts` (the batch's non-finite tensors, by
        their part) only: each of `parts` a NumPy array; else None."""
        arrays = self._arrays()
        if self.source is None or not parts or not parts <= set(arrays):
            return None
        kept = self._finite_mask(arrays)
        dropped = int(len(kept) - kept.sum())
        if dropped == 0 or dropped == len(kept):
            return None
        ranks = tuple(value.ndim for value in arrays.values())
        holding = tuple(part for part in arrays if part in parts)
        return FitRows(self.source, tuple(arrays), ranks, holding, dropped, len(kept))

    def finite_batches(self) -> Callable[[], Iterator] | None:
        """The batches of the arrays' finite rows (the `finite_rows` patch), or None
        unless the data is NumPy arrays."""
        arrays = self._arrays()
        if "x" not in arrays:
            return None
        kept = self._finite_mask(arrays)
        data = {part: arrays[part][kept] if part in arrays else None for part in PARTS}
        return fit_batches(data["x"], data["y"], data["sample_weight"], self.batch_size)


def fit_batches(x, y=None, sample_weight=None, batch_size=None) -> Callable[[], Iterator] | None:
    """A factory of fresh iterators over `fit`'s training batches, or None.

    Args:
        x, y, sample_weight, batch_size: as given to `fit`.

    Returns:
        None when the data cannot be read again safely (a generator, a `PyDataset`).
    """
    if isinstance(x, tf.data.Dataset):
        return lambda: iter(x)
    if not _is_array_tree(x) or (y is not None and not _is_array_tree(y)):
        return None
    adapter = get_data_adapter(
        x=x, y=y, sample_weight=sample_weight, batch_size=batch_size or DEFAULT_BATCH_SIZE
    )
    return lambda: iter(adapter.get_tf_dataset())
