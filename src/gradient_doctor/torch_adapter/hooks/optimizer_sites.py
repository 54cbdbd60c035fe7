"""The user's lines that built each optimizer, its schedulers, and called its `step()`.

A lower learning rate is a patch of the line that constructed the optimizer
(`torch.optim.SGD(model.parameters(), lr=...)`), or of the line that built its
`OneCycleLR` (which sets the rates itself), and gradient clipping in PyTorch is a
line the user writes just before `optimizer.step()`; no such line is an op the
replay sees. Under `gradient-doctor run` the doctor is installed before the script
runs, so `OptimizerSites` wraps `torch.optim.Optimizer.__init__` (which every torch
optimizer's constructor calls) and `torch.optim.lr_scheduler.LRScheduler.__init__`
(which every scheduler stepping an optimizer's rate calls: `SequentialLR` and
`ChainedScheduler` only hold such schedulers; `ReduceLROnPlateau`, which does not
call it, is wrapped on its own) to note the user's frame that
constructed each, and registers a global step pre-hook to note the user's line of
each optimizer's first `step()`. Frames of the object's own constructor chain or
`step` (a user's subclass calling `super().__init__()`) are skipped, so the line is
the one that built or stepped it. Optimizers and schedulers are held by weak
reference: nothing is kept alive, and nothing either computes changes.
"""

from __future__ import annotations

import functools
import inspect
import sys
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType

import torch
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau
from torch.optim.optimizer import register_optimizer_step_pre_hook

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.knowledge.rewrites.optimizer import OptimizerSite, SchedulerSite
from gradient_doctor.core.knowledge.rewrites.torch_optimizer import RATE_SETTING_SCHEDULERS
from gradient_doctor.core.source_frames import statement_line
from gradient_doctor.torch_adapter.localize.source_lines import is_user_file


@dataclass(frozen=True)
class Construction:
    """What the constructor of one optimizer was given, as a fix to it needs it.

    Attributes:
        source: the user's call that built it (its lines when it spans several).
        class_name: its class, e.g. "SGD".
        learning_rate: its `lr` as constructed (`defaults["lr"]`, the class's default
            when the call gave none; a scheduler changes the param groups, not this),
            or None when it is not a number.
        param_groups: how many param groups it was built with (a clipping line cannot
            take the constructor's first argument as written when it holds dicts).
        params_iterator: its first argument was a one-shot iterator (a generator).
        group_rates: each param group's `lr` as constructed (a group's own, else the
            constructor's), None for one that is not a number.
    """

    source: SourceLine
    class_name: str
    learning_rate: float | None
    param_groups: int
    params_iterator: bool = False
    group_rates: tuple[float | None, ...] = ()


class OptimizerSites:
    """Notes, while installed, the lines that construct and step each torch optimizer
    and construct its learning-rate schedulers."""

    def __init__(self, on_built=None) -> None:
        """`on_built(optimizer)`, when given, is called after each user's optimizer is built."""
        self._on_built = on_built
        self._built: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._stepped: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        # scheduler -> (a weak reference to its optimizer, where it was built)
        self._schedulers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._originals: dict[type, object] = {}
        self._handle = None

    def install(self) -> None:
        """Wrap the constructors and register the step pre-hook (once)."""
        if self._originals:
            return
        self._wrap_init(torch.optim.Optimizer, self._note_construction)
        self._wrap_init(LRScheduler, self._note_scheduler)
        if "__init__" in ReduceLROnPlateau.__dict__:  # its own, not calling LRScheduler's
            self._wrap_init(ReduceLROnPlateau, self._note_scheduler)
        self._handle = register_optimizer_step_pre_hook(self._note_step)

    def uninstall(self) -> None:
        """Put the constructors back and remove the hook; what was noted stays."""
        for cls, original in self._originals.items():
            cls.__init__ = original
        self._originals.clear()
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _wrap_init(self, cls: type, note) -> None:
        """Make `cls.__init__` call `note(instance, args, kwargs, caller's frame)` after it."""
        original = self._originals[cls] = cls.__dict__["__init__"]

        @functools.wraps(original)
        def noting_init(instance, *args, **kwargs):
            original(instance, *args, **kwargs)
            note(instance, args, kwargs, sys._getframe(1))

        cls.__init__ = noting_init

    def construction(self, optimizer: torch.optim.Optimizer) -> Construction | None:
        """How `optimizer` was built, or None when it was built before the install."""
        return self._built.get(optimizer)

    def step_line(self, optimizer: torch.optim.Optimizer) -> SourceLine | None:
        """The user's line of `optimizer`'s first `step()`, or None before it stepped."""
        return self._stepped.get(optimizer)

    def schedulers(self, optimizer: torch.optim.Optimizer) -> tuple[SchedulerSite, ...]:
        """The live schedulers built on `optimizer` while installed, in order."""
        return tuple(
            built for owner, built in list(self._schedulers.values()) if owner() is optimizer
        )

    def site(self, optimizer: torch.optim.Optimizer) -> OptimizerSite | None:
        """`optimizer` as the core's optimizer rewrites need it, or None without the line
        that built it. Under a scheduler that sets the rates itself its learning rate
        is the one in use now (at a failing update, that update's)."""
        built = self.construction(optimizer)
        if built is None:
            return None
        step = self.step_line(optimizer)
        where = (step.file, step.line) if step is not None else None
        shared = any(
            (line.file, line.line) == where
            for other, line in self._stepped.items()
            if other is not optimizer
        )
        schedulers = self.schedulers(optimizer)
        rate = built.learning_rate
        if any(scheduler.kind in RATE_SETTING_SCHEDULERS for scheduler in schedulers):
            rate = _number(optimizer.param_groups[0].get("lr"))
        return OptimizerSite(
            built.source,
            built.class_name,
            rate,
            framework="torch",
            step_line=step,
            param_groups=built.param_groups,
            params_iterator=built.params_iterator,
            step_shared=shared,
            schedulers=schedulers,
            group_rates=built.group_rates,
        )

    def _note_construction(self, optimizer, args, kwargs, frame: FrameType) -> None:
        try:
            if optimizer not in self._built:
                params = args[0] if args else kwargs.get("params")
                self._note_built(optimizer, params, frame)
                if self._on_built is not None and optimizer in self._built:
                    self._on_built(optimizer)
        except Exception:  # noqa: BLE001 - never let the doctor's notes break the user's code
            pass

    def _note_built(self, optimizer, params, frame: FrameType) -> None:
        source = statement_line(_user_frame(frame, optimizer))
        if source is None:
            return
        groups = len(optimizer.param_groups)
        if isinstance(params, list | tuple) and params and isinstance(params[0], dict):
            groups = max(groups, 2)  # written as dicts: not a list of tensors to clip
        self._built[optimizer] = Construction(
            source,
            type(optimizer).__name__,
            _number(optimizer.defaults.get("lr")),
            groups,
            params_iterator=isinstance(params, Iterator),
            group_rates=tuple(_number(group.get("lr")) for group in optimizer.param_groups),
        )

    def _note_scheduler(self, scheduler, args, kwargs, frame: FrameType) -> None:
        try:
            optimizer = scheduler.optimizer
            if scheduler in self._schedulers or not isinstance(optimizer, torch.optim.Optimizer):
                return
            source = statement_line(_user_frame(frame, scheduler))
            if source is not None:
                built = SchedulerSite(source, type(scheduler).__name__, _torch_kind(scheduler))
                self._schedulers[scheduler] = (weakref.ref(optimizer), built)
        except Exception:  # noqa: BLE001 - never let the doctor's notes break the user's code
            pass

    def _note_step(self, optimizer, args, kwargs) -> None:
        if optimizer in self._stepped:
            return
        try:
            line = statement_line(_user_frame(sys._getframe(1), optimizer))
        except Exception:  # noqa: BLE001 - never let the doctor's notes break the user's step
            return
        if line is not None:
            self._stepped[optimizer] = line


def _user_frame(frame: FrameType | None, owner) -> FrameType | None:
    """The innermost frame from `frame` out that is the user's and not one of
    `owner`'s own methods (a user's subclass's `__init__` or `step`)."""
    while frame is not None:
        if is_user_file(frame.f_code.co_filename) and frame.f_locals.get("self") is not owner:
            return frame
        frame = frame.f_back
    return None


def _number(rate) -> float | None:
    """A learning rate as a float; None when it is not one number (a tensor of several)."""
    try:
        return float(rate) if rate is not None else None
    except (TypeError, ValueError, RuntimeError):
        return None


def _torch_kind(scheduler: LRScheduler) -> str:
    """The name of the `torch.optim.lr_scheduler` class `scheduler` is or derives from."""
    return next(
        (
            cls.__name__
            for cls in type(scheduler).__mro__
            if cls.__module__ == LRScheduler.__module__ and cls.__name__ != "_LRScheduler"
        ),
        "LRScheduler",
    )


def step_code(optimizer: torch.optim.Optimizer):
    """The code object of the `step` of `optimizer`'s class (its decorators unwrapped),
    or None: where it is defined says whose arithmetic the update is, torch's or the
    user's own."""
    step = inspect.unwrap(getattr(type(optimizer), "step", None))
    return getattr(step, "__code__", None)
