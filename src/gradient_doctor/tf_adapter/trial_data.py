"""Where fix trials find batches after the failing one: the training data of `fit`, read anew.

A trial that repeats the failing batch shows whether the remedy survives it, but a
loss on one batch always falls. When `fit` was given data that can be read again
without touching the user's own iterators (NumPy arrays, tensors, a `tf.data`
dataset), a trial goes on with that data from its start. Python generators and
`PyDataset`s are not read: that would consume or reorder the user's data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import tensorflow as tf

DEFAULT_BATCH_SIZE = 32  # Keras's own default for `fit`


def _is_array_tree(value) -> bool:
    if isinstance(value, np.ndarray | tf.Tensor):
        return True
    if isinstance(value, list | tuple) and value:
        return all(_is_array_tree(v) for v in value)
    if isinstance(value, dict) and value:
        return all(_is_array_tree(v) for v in value.values())
    return False


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
    from keras.src.trainers.data_adapters import get_data_adapter

    adapter = get_data_adapter(
        x=x, y=y, sample_weight=sample_weight, batch_size=batch_size or DEFAULT_BATCH_SIZE
    )
    return lambda: iter(adapter.get_tf_dataset())
