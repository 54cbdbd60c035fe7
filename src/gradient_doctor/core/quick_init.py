"""A frozen dataclass's `__init__` that stores its fields at once, for the records made every step.

`@dataclass(frozen=True)` forbids assignment after construction by a `__setattr__`
that raises, so its generated `__init__` stores each field through
`object.__setattr__`: about 0.25 us a field. The records the doctor makes after every
training step (a `StepReading`, one or two `StepRecord`s, a `LayerRecord` per layer on
the per-step gradient norms, an update's `Check`) then cost more to build than the
detectors spend reading them. `quick_init` gives such a class an `__init__` with the
same parameters and defaults that writes the instance's `__dict__` directly; the class
stays frozen (assignment still raises), its `repr`, `==`, hash and `dataclasses.replace`
are the dataclass's own.
"""

from __future__ import annotations

import dataclasses


def quick_init(cls: type) -> type:
    """Give the frozen dataclass `cls` an `__init__` that stores its fields directly.

    Apply it above `@dataclass(frozen=True)`. The class may have no `__post_init__`,
    no `default_factory`, no keyword-only field and no `__slots__` (its instances
    need a `__dict__`).

    Raises:
        TypeError: for a class that is not such a dataclass.

    Example:
        >>> @quick_init
        ... @dataclass(frozen=True)
        ... class Point:
        ...     x: float
        ...     y: float = 0.0
        >>> Point(1.0)
        Point(x=1.0, y=0.0)
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise TypeError(f"`quick_init` takes a frozen dataclass. Received: {cls.__name__}")
    fields = dataclasses.fields(cls)
    if (
        hasattr(cls, "__post_init__")
        or "__slots__" in vars(cls)
        or any(f.default_factory is not dataclasses.MISSING or f.kw_only for f in fields)
    ):
        raise TypeError(
            "`quick_init` takes a frozen dataclass without `__post_init__`, "
            f"`default_factory`, keyword-only fields or slots. Received: {cls.__name__}"
        )
    defaults = {f"_default_{f.name}": f.default for f in fields}
    signature = ", ".join(
        f.name if f.default is dataclasses.MISSING else f"{f.name}=_default_{f.name}"
        for f in fields
    )
    stores = "".join(f"    stored[{f.name!r}] = {f.name}\n" for f in fields)
    source = f"def __init__(self, {signature}):\n    stored = self.__dict__\n{stores}"
    namespace = dict(defaults)
    exec(source, namespace)  # as `dataclasses` makes the `__init__` it replaces
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    init.__annotations__ = dict(cls.__init__.__annotations__)
    cls.__init__ = init
    return cls
