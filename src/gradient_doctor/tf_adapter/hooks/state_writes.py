"""The user's calls that wrote a non-finite value into a layer's state before it was trained.

`Layer.set_weights`, `Model.load_weights`, a preprocessing layer's `adapt` (a
`Normalization` adapted on data with a missing value learns a NaN mean) and a
variable's `assign` made by hand outside any training step can put NaN or Inf into
a weight or a statistic before the first step; the step then only reads it. Under
`gradient-doctor run`, `recording_patches` checks the variables each such call wrote,
once, right after it returns (never per training step), and remembers the user's
line of each call that left non-finite values, so the diagnosis can name it.
"""

from __future__ import annotations

import functools
import sys
import weakref
from dataclasses import dataclass

import keras
import numpy as np
import tensorflow as tf

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.source_frames import is_user_file, user_line
from gradient_doctor.tf_adapter._tf_internals import KerasVariable, resource_variable_ops
from gradient_doctor.tf_adapter.localize import step_context
from gradient_doctor.tf_adapter.step.guard import in_guarded_update


@dataclass(frozen=True)
class StateWrite:
    """A call that left non-finite values in some variables.

    Attributes:
        call: the method called: "adapt", "set_weights", "load_weights" or "assign".
        source: the user's line of that call.
    """

    call: str
    source: SourceLine | None


# id(variable) -> (the variable, weakly, and the last write that left it non-finite).
_writes: dict[int, tuple[weakref.ref, StateWrite]] = {}


def write_of(variable) -> StateWrite | None:
    """The last recorded call that left `variable` non-finite, or None."""
    entry = _writes.get(id(variable))
    if entry is None or entry[0]() is not variable:
        return None
    return entry[1]


def written_variables() -> list:
    """Every variable a recorded call left non-finite (and that still exists)."""
    return [v for ref, _ in list(_writes.values()) if (v := ref()) is not None]


def recording_patches() -> list[tuple[type, str, object]]:
    """(owner, attribute, replacement) for each state-writing method, recording as above.

    Only calls made from the user's own code count (Keras's `load_weights` calls
    `set_weights` itself: that inner call is the outer one's business), and an
    `assign` only outside any training step (the guard watches the steps' own
    updates) and outside a `tf.function` (a traced assign has no value to check).
    """
    patches = [
        (
            keras.Layer,
            "set_weights",
            _recorded(keras.Layer.set_weights, "set_weights", _layer_weights),
        ),
        (
            keras.Model,
            "load_weights",
            _recorded(keras.Model.load_weights, "load_weights", _layer_weights),
        ),
    ]
    patches += [
        (cls, "adapt", _recorded(cls.__dict__["adapt"], "adapt", _layer_weights))
        for cls in _subclasses(keras.Layer)
        if "adapt" in cls.__dict__
    ]
    patches += [
        (cls, "assign", _recorded(cls.__dict__["assign"], "assign", _assigned, _outside_steps))
        for base in (KerasVariable, resource_variable_ops.BaseResourceVariable)
        for cls in _subclasses(base)
        if "assign" in cls.__dict__
    ]
    return patches


def _subclasses(cls: type) -> list[type]:
    found, pending = [], [cls]
    while pending:
        current = pending.pop()
        found.append(current)
        pending.extend(current.__subclasses__())
    return list(dict.fromkeys(found))


def _layer_weights(layer, *args, **kwargs) -> list:
    return list(getattr(layer, "weights", None) or [])


def _assigned(variable, *args, **kwargs) -> list:
    return [variable]


def _outside_steps() -> bool:
    return (
        tf.executing_eagerly()
        and step_context.current_scope() is None
        and step_context.current_recorder() is None
        and not in_guarded_update()
    )


def _recorded(method, call: str, written, applies=None):
    """`method`, followed (for a call from the user's code) by a check of what it wrote."""

    @functools.wraps(method)
    def wrapper(owner, *args, **kwargs):
        result = method(owner, *args, **kwargs)
        caller = sys._getframe(1)
        if is_user_file(caller.f_code.co_filename) and (applies is None or applies()):
            _note(call, user_line(caller), written(owner, *args, **kwargs))
        return result

    return wrapper


def _note(call: str, source: SourceLine | None, variables: list) -> None:
    """Remember `call` for each of `variables` it left non-finite; forget older
    records of those it left finite."""
    for variable in variables:
        key = id(variable)
        if _is_finite(variable):
            _writes.pop(key, None)
            continue
        try:
            ref = weakref.ref(variable)
        except TypeError:
            continue
        _writes[key] = (ref, StateWrite(call, source))


def _is_finite(variable) -> bool:
    """Whether a variable's values are all finite (True for non-float variables)."""
    dtype = getattr(variable, "dtype", None)
    if not getattr(tf.as_dtype(dtype) if dtype is not None else tf.float32, "is_floating", False):
        return True
    try:
        values = np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable)
    except Exception:  # an uninitialised or distributed variable: nothing to check here
        return True
    return bool(np.isfinite(values).all())
