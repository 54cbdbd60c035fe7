"""Telling the backward pass from the forward one while a step runs or is traced.

The op-by-op replay and the crash dump's trace both need to know, for each op, whether
it belongs to the backward pass and, if so, whose gradient it computes. They learn it
the same way: the tape hook opens `backward()` around each `tape.gradient`, and every
gradient function TensorFlow looks up is wrapped so that, while it runs, the forward
op it serves is known. Only how that forward op is found differs (a replay matches
eager tensors, a trace graph ops), so the recorders subclass `BackwardMarks`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

from gradient_doctor.tf_adapter._tf_internals import (
    current_name_scope_path,
    gradient_registry,
    set_gradient_registry,
)


def keras_layer_path() -> str | None:
    """The Keras layer path being called now (e.g. "model/dense"), or None."""
    if current_name_scope_path is None:  # pragma: no cover - other Keras layouts
        return None
    return current_name_scope_path() or None


class BackwardMarks:
    """Where the running code is: inside `tape.gradient`, and in whose gradient function.

    Subclasses implement `forward_of(op, op_type)`: the forward op (in their own
    terms) a gradient function was called for.
    """

    def __init__(self) -> None:
        self.losses: list[object] = []
        self._backward_depth = 0
        self._gradient_of: list[tuple[str, object]] = []

    @property
    def in_backward(self) -> bool:
        """True while a `tape.gradient` or a gradient function runs."""
        return self._backward_depth > 0

    def gradient_of(self) -> tuple[str | None, object]:
        """(forward op type, forward op) of the innermost gradient function, or Nones."""
        if self.in_backward and self._gradient_of:
            return self._gradient_of[-1]
        return None, None

    def forward_of(self, op, op_type: str) -> object:
        """The forward op that the gradient function of `op_type` was called for with `op`."""
        raise NotImplementedError

    def note_window(self, window) -> None:
        """Keep the tape window of a `tape.gradient` target (the replay needs it)."""

    def wrap_gradient_function(self, op_type: str, function):
        """`function` (the gradient of `op_type`), marking what it computes as backward."""

        @functools.wraps(function)
        def gradient_function(op, *grads):
            self._gradient_of.append((op_type, self.forward_of(op, op_type)))
            self._backward_depth += 1
            try:
                return function(op, *grads)
            finally:
                self._backward_depth -= 1
                self._gradient_of.pop()

        return gradient_function

    def note_loss(self, target) -> None:
        """A loss the step computed and never differentiated: the script stopped on it."""
        self.losses.append(target)
        self.note_window(None)

    @contextmanager
    def backward(self, target, window=None) -> Iterator[None]:
        """Mark ops run inside `tape.gradient` as backward; remember the target."""
        self.losses.append(target)
        self.note_window(window)
        self._backward_depth += 1
        try:
            yield
        finally:
            self._backward_depth -= 1


@contextmanager
def gradient_functions_marked(marks: BackwardMarks) -> Iterator[None]:
    """While the block runs, every gradient function looked up is wrapped by `marks`."""
    registry = gradient_registry()  # eager and graph backprop look functions up here

    class _WrappingRegistry:
        def __getattr__(self, name):
            return getattr(registry, name)

        def lookup(self, name):
            function = registry.lookup(name)
            return None if function is None else marks.wrap_gradient_function(name, function)

    set_gradient_registry(_WrappingRegistry())
    try:
        yield
    finally:
        set_gradient_registry(registry)
