"""An aten op's arguments as JSON and back: tensors as value ids, the few other kinds
aten takes spelled out, anything else refused (never pickled).

Aten arguments are tensors, numbers, booleans, strings, None, dtypes, devices, layouts,
memory formats, and lists or tuples of these. A tensor is written as the id of its
value in the step (`{"tensor": 7}`), so the replay feeds each op the value an earlier
replayed op made; every other kind but a plain JSON one is a one-key object naming it
(`{"dtype": "float32"}`, `{"float": "inf"}`). A generator, a storage or any other object
is refused with its type's name.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from gradient_doctor.errors import DoctorError


class Unencodable(DoctorError):
    """An argument the dump cannot write without pickling it (the message names its type)."""


class MissingValue(DoctorError):
    """A tensor the replay has no value for (left out of the dump, or never made)."""


def encode(value: object, tensor_id: Callable[[torch.Tensor], int]):
    """`value` as JSON, each tensor replaced by `tensor_id(tensor)`.

    Raises:
        Unencodable: `value` holds an object of a kind aten arguments have not.
    """
    if isinstance(value, torch.Tensor):
        return {"tensor": tensor_id(value)}
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, complex):
        return {"complex": [encode(value.real, tensor_id), encode(value.imag, tensor_id)]}
    if isinstance(value, list):
        return [encode(item, tensor_id) for item in value]
    if isinstance(value, tuple):  # torch.Size too
        return {"tuple": [encode(item, tensor_id) for item in value]}
    if isinstance(value, torch.dtype):
        return {"dtype": _torch_name(value)}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.memory_format):
        return {"memory_format": _torch_name(value)}
    if isinstance(value, torch.layout):
        return {"layout": _torch_name(value)}
    raise Unencodable(
        f"an argument of type {type(value).__module__}.{type(value).__qualname__}, which "
        "the dump cannot write without pickling it"
    )


def encode_kwargs(kwargs: dict, tensor_id: Callable[[torch.Tensor], int]) -> dict:
    """The keyword arguments of an op, each value encoded."""
    return {name: encode(value, tensor_id) for name, value in kwargs.items()}


def decode(
    value,
    tensor_of: Callable[[int], torch.Tensor],
    device_of: Callable[[str], torch.device],
):
    """Undo `encode`: `tensor_of(id)` gives each tensor, `device_of(name)` each device
    (the dumped one, or the device the replay runs on where that one is missing).

    Raises:
        MissingValue: from `tensor_of`.
        ValueError: an object that `encode` never writes.
    """
    if isinstance(value, list):
        return [decode(item, tensor_of, device_of) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) != 1:
        raise ValueError(f"an argument written as {value!r}")
    ((kind, content),) = value.items()
    if kind == "tensor":
        return tensor_of(int(content))
    if kind == "float":
        return float(content)
    if kind == "complex":
        return complex(*(decode(part, tensor_of, device_of) for part in content))
    if kind == "tuple":
        return tuple(decode(item, tensor_of, device_of) for item in content)
    if kind == "device":
        return device_of(content)
    if kind in _TORCH_KINDS:
        found = getattr(torch, str(content), None)
        if isinstance(found, _TORCH_KINDS[kind]):
            return found
    raise ValueError(f"an argument written as {value!r}")


def decode_kwargs(value: dict, tensor_of, device_of) -> dict:
    """Undo `encode_kwargs`."""
    return {name: decode(item, tensor_of, device_of) for name, item in value.items()}


# The torch objects written by name, and the type the name must give back.
_TORCH_KINDS = {"dtype": torch.dtype, "memory_format": torch.memory_format, "layout": torch.layout}


def _torch_name(value) -> str:
    """ "float32" for `torch.float32`, "channels_last" for `torch.channels_last`."""
    return str(value).removeprefix("torch.")
