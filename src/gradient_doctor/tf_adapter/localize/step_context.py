"""Thread-local context of the training step being traced, run or replayed."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

_local = threading.local()


@dataclass
class StepCall:
    """One call of a training step that the doctor can run again: callable and arguments.

    `traceable` is the step's Python function when it can be traced afresh as a
    `tf.function` (fix trials trace it again with a remedy in place), else None.
    """

    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    traceable: Callable[..., Any] | None = None
    # The failing run's stateful random draws, as (op type, value), for the replay.
    draws: list | None = None


@dataclass
class StepScope:
    """What the guard needs to know while a step's Python code runs (or is traced).

    Attributes:
        batch: the step's input data (symbolic while tracing) to keep when the
            guard trips, or None when the caller keeps the arguments itself.
        stash: where to keep `batch` (a `BatchStash`), or None.
        draws: where to keep the step's stateful random draws (a `RandomDraws`),
            or None.
        loss: the most recent `tape.gradient` target in this step.
        tape_window: (start, end) positions between which that tape recorded
            (graph op ids while tracing, trace indices while replaying), or None.
        call: how to run this step again, when the caller knows.
        step_index: a tensor counting the steps the caller has run (for steps
            run several per compiled call), or None.
        applied: set by the guard when an optimizer update runs in this step.
    """

    batch: Any = None
    stash: Any = None
    draws: Any = None
    loss: Any = None
    tape_window: tuple | None = None
    call: StepCall | None = None
    step_index: Any = None
    applied: bool = False


def current_scope() -> StepScope | None:
    """The innermost active step scope, or None outside any watched step."""
    stack = getattr(_local, "scopes", None)
    return stack[-1] if stack else None


@contextmanager
def step_scope(scope: StepScope) -> Iterator[StepScope]:
    """Make `scope` the current step scope while the block runs."""
    stack = getattr(_local, "scopes", None)
    if stack is None:
        stack = _local.scopes = []
    stack.append(scope)
    try:
        yield scope
    finally:
        stack.pop()


# How many `tape.gradient` calls' gradients are remembered for the updates that follow
# (a GAN's step takes two tapes' gradients before it applies either).
_GRADIENT_CALLS_KEPT = 4


def note_loss(target, tape_window=None, grads=None, sources=None) -> None:
    """Remember a `tape.gradient` target (and its tape's window) for the update that
    follows, and, by `grads` (what the call returned), for the update they are given to,
    with the `sources` it returned None for."""
    scope = current_scope()
    if scope is not None:
        scope.loss, scope.tape_window = target, tape_window
    _local.loss = (target, tape_window)
    returned = tf.nest.flatten(grads) if grads is not None else []
    flat = [g for g in returned if g is not None]
    # A call that gave every source None: no gradient of it can be matched to an update
    # (`filled_in` reads it).
    _local.all_none = tf.nest.flatten(sources) if returned and not flat and sources else None
    if flat:
        none_for = []
        if len(flat) < len(returned) and sources is not None:  # some None: which sources
            given = tf.nest.flatten(sources)
            none_for = [s for s, g in zip(given, returned, strict=False) if g is None]
        calls = getattr(_local, "gradient_calls", None)
        if calls is None:
            calls = _local.gradient_calls = []
        calls.append((flat, (target, tape_window), none_for))
        del calls[:-_GRADIENT_CALLS_KEPT]


def given_none(grads) -> list:
    """The sources that the `tape.gradient` call that returned `grads` (matched by
    identity, as `take_loss` matches them) gave None; [] when there is no such call.
    Read before `take_loss`, which forgets the call."""
    index = _call_that_returned(grads)
    return _local.gradient_calls[index][2] if index is not None else []


def filled_in(grads, variables) -> list:
    """The variables the update's `tape.gradient` call gave None that the update hands a
    gradient anyway: the user's code filled the None in (`g if g is not None else
    tf.zeros_like(v)`), so no error or warning says they are cut off. The call is the
    one that returned any of `grads`, or, when none did, the latest call, when it gave
    every source None. Read before `take_loss`, which forgets the calls."""
    calls = getattr(_local, "gradient_calls", None) or []
    all_none = getattr(_local, "all_none", None)
    if not all_none and not any(none_for for _, _, none_for in calls):
        return []  # every noted call gave every source a gradient: the usual update
    index = _call_that_returned(grads)
    if index is not None:
        cut = _local.gradient_calls[index][2]
    else:
        cut = all_none or []
    ids = {id(source) for source in cut}
    return [v for g, v in zip(grads, variables, strict=False) if g is not None and id(v) in ids]


def _call_that_returned(grads) -> int | None:
    """The index of the noted `tape.gradient` call that returned any of `grads`."""
    for index, (returned, _, _) in enumerate(getattr(_local, "gradient_calls", None) or []):
        if any(g is r for g in grads for r in returned):
            return index
    return None


def take_loss(grads=()) -> tuple:
    """The (loss, tape window) of the current update, then forgotten; Nones if none.

    The update's loss is the target of the `tape.gradient` call that returned its
    `grads` (matched by identity: `d_tape.gradient(d_loss, ...)` and
    `g_tape.gradient(g_loss, ...)` both come before either update), else the most
    recent target noted.
    """
    index = _call_that_returned(grads)
    _local.all_none = None
    if index is not None:
        _, noted, _ = _local.gradient_calls.pop(index)
        _local.loss = None
        return noted
    scope = current_scope()
    noted = (scope.loss, scope.tape_window) if scope is not None else None
    noted = noted or getattr(_local, "loss", None) or (None, None)
    _local.loss = None
    return noted


def mark_applied() -> None:
    """Tell every active step scope that an optimizer update ran inside it."""
    for scope in getattr(_local, "scopes", None) or ():
        scope.applied = True


def current_recorder():
    """The replay recorder collecting gradients and losses, or None when not replaying."""
    return getattr(_local, "recorder", None)


@contextmanager
def recording(recorder) -> Iterator[None]:
    """Route optimizer updates and tape targets to `recorder` instead of the model."""
    previous = getattr(_local, "recorder", None)
    _local.recorder = recorder
    try:
        yield
    finally:
        _local.recorder = previous


def request_live_recording(recording) -> None:
    """Ask for the next step (from its tape's opening) to be recorded as it runs."""
    _local.live_request = recording


def take_live_request():
    """The pending live recording, if any (then forgotten)."""
    recording = getattr(_local, "live_request", None)
    _local.live_request = None
    return recording
