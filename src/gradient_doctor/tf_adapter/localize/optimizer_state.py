"""The state the optimizers keep, read between steps: the weights they train and their own slots.

The guard checks what goes into an update (the loss and the gradients), not what the
update writes. When a step reads weights that went non-finite with no call of the
user's writing them, the optimizer's own update did; its slots (Adam's `momentum` and
`velocity`, one per weight) say how. Reading them costs nothing per step: it is done
only after a failure, one fused finite check and one host copy of each variable that
failed it.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from gradient_doctor.core.evidence import StateValues
from gradient_doctor.tf_adapter._tf_internals import trainable_variables_of
from gradient_doctor.tf_adapter.hooks.creation_sites import variable_path
from gradient_doctor.tf_adapter.step.tensor_summary import dtype_name


def state_variables(optimizers) -> tuple[list, list]:
    """(weights, slots): the floating-point variables the optimizers train, then their own
    (a loss-scaling optimizer's and its inner one's), each once, in the optimizers' order."""
    weights, slots, seen = [], [], set()

    def add(found: list, variable) -> None:
        inner = getattr(variable, "value", variable)  # a Keras variable wraps a tf.Variable
        key = id(inner) if isinstance(inner, tf.Variable) else id(variable)
        if key in seen or not _floating(variable):
            return
        seen.add(key)
        found.append(variable)

    for optimizer in optimizers:
        inner = getattr(optimizer, "inner_optimizer", None)
        for opt in (optimizer, inner) if inner is not None else (optimizer,):
            for variable in trainable_variables_of(opt):
                add(weights, variable)
    for optimizer in optimizers:
        inner = getattr(optimizer, "inner_optimizer", None)
        for opt in (optimizer, inner) if inner is not None else (optimizer,):
            for variable in list(getattr(opt, "variables", None) or []):
                add(slots, variable)
    return weights, slots


def finite_flags(variables: list) -> list[bool]:
    """Whether each variable holds only finite values: one fused check, one host read."""
    if not variables:
        return []
    flags = tf.stack([tf.reduce_all(tf.math.is_finite(_read(v))) for v in variables])
    return [bool(flag) for flag in flags.numpy()]


def nonfinite_values(weights: list, slots: list) -> tuple[StateValues, ...]:
    """What each of `weights`, then each of `slots`, holds when it is not all finite."""
    variables = weights + slots
    flags = finite_flags(variables)
    owners = slot_owners(weights)
    return tuple(
        values_of(variable, owners)
        for variable, finite in zip(variables, flags, strict=True)
        if not finite
    )


def values_of(variable, owners: dict[str, str] | None = None) -> StateValues:
    """Summarise one variable; a slot of the optimizer names the weight it belongs to."""
    array = array_of(variable)
    finite = np.isfinite(array)
    magnitudes = np.abs(array[finite].astype(np.float64))
    name = variable_path(variable)
    weight, slot = slot_of(name, owners or {})
    return StateValues(
        name=name,
        dtype=dtype_name(variable),
        size=int(array.size),
        nan=int(np.isnan(array).sum()),
        inf=int(np.isinf(array).sum()),
        largest=float(magnitudes.max()) if magnitudes.size else None,
        weight=weight,
        slot=slot,
    )


def slot_owners(weights: list) -> dict[str, str]:
    """The prefix each weight's slots are named with (Keras names them after the weight's
    path: `dense/kernel` -> `dense_kernel_velocity`), to the weight's name."""
    return {variable_path(w).replace("/", "_") + "_": variable_path(w) for w in weights}


def slot_of(name: str, owners: dict[str, str]) -> tuple[str | None, str | None]:
    """(the weight, the slot's own name) of an optimizer variable named `name` (its path,
    e.g. "adam/dense_kernel_velocity"), or (None, None) when it is no weight's slot."""
    own = name.rsplit("/", 1)[-1]
    matches = [prefix for prefix in owners if own.startswith(prefix) and len(own) > len(prefix)]
    if not matches:
        return None, None
    prefix = max(matches, key=len)  # `dense_1_kernel_` before `dense_1_`
    return owners[prefix], own[len(prefix) :]


def _floating(variable) -> bool:
    dtype = getattr(variable, "dtype", None)
    return bool(getattr(tf.as_dtype(dtype), "is_floating", False)) if dtype is not None else False


def _read(variable):
    inner = getattr(variable, "value", variable)
    return inner.read_value() if hasattr(inner, "read_value") else tf.convert_to_tensor(inner)


def array_of(variable) -> np.ndarray:
    """The variable's values now, in host memory."""
    return np.asarray(_read(variable).numpy())
