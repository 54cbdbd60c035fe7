"""`quick_init`: a frozen dataclass's `__init__` that stores its fields at once, same behaviour."""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from gradient_doctor.core.pipeline import StepReading
from gradient_doctor.core.quick_init import quick_init
from gradient_doctor.core.records import LayerRecord, StepRecord


@quick_init
@dataclasses.dataclass(frozen=True)
class _Point:
    x: float
    y: float = 0.0
    tags: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class _Plain:
    x: float
    y: float = 0.0
    tags: tuple[str, ...] = ()


def test_it_builds_what_the_dataclass_builds():
    for args, kwargs in [((1.0,), {}), ((1.0, 2.0), {}), ((1.0,), {"tags": ("a",)})]:
        quick, plain = _Point(*args, **kwargs), _Plain(*args, **kwargs)
        assert dataclasses.astuple(quick) == dataclasses.astuple(plain)
    assert repr(_Point(1.0)) == "_Point(x=1.0, y=0.0, tags=())"
    assert _Point(1.0, 2.0) == _Point(x=1.0, y=2.0) and hash(_Point(1.0)) == hash(_Point(1.0))
    assert [p.name for p in inspect.signature(_Point).parameters.values()] == ["x", "y", "tags"]


def test_the_instance_stays_frozen_and_copies_as_before():
    point = _Point(1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.x = 2.0
    assert dataclasses.replace(point, y=3.0) == _Point(1.0, 3.0)
    assert pickle.loads(pickle.dumps(point)) == point


def test_missing_and_unknown_arguments_fail_as_the_dataclass_s_own():
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'x'"):
        _Point()
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        _Point(1.0, z=2.0)


def test_the_records_made_every_step_use_it():
    for cls in (StepRecord, LayerRecord, StepReading):
        assert "__dataclass_builtins_object__" not in cls.__init__.__code__.co_names, cls
    assert StepRecord(2, loss=1.5) == StepRecord(step=2, loss=1.5, grad_norm=None)


def test_classes_it_cannot_serve_are_refused():
    @dataclasses.dataclass
    class Mutable:
        x: int

    @dataclasses.dataclass(frozen=True)
    class Checked:
        x: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True)
    class Listed:
        x: list = dataclasses.field(default_factory=list)

    for cls in (Mutable, Checked, Listed):
        with pytest.raises(TypeError, match="`quick_init` takes a frozen dataclass"):
            quick_init(cls)
