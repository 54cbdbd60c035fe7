"""Let the doctor see each `tape.gradient` target (the step's loss) and what the tape recorded.

In plain eager code the tape's events also go to `eager_trace`, which traces the step.
"""

from __future__ import annotations

import functools

import tensorflow as tf

from gradient_doctor.tf_adapter import eager_trace, step_context

_original_gradient = tf.GradientTape.gradient
_original_enter = tf.GradientTape.__enter__
_original_exit = tf.GradientTape.__exit__
_original_watch = tf.GradientTape.watch
_WINDOW = "_gradient_doctor_window"


def position():
    """Where the step is now: a trace index while replaying, an op id while tracing."""
    recorder = step_context.current_recorder()
    if recorder is not None:
        return len(recorder.events)
    if not tf.executing_eagerly():
        return tf.compat.v1.get_default_graph().version + 1  # the id of the newest op
    return None


@functools.wraps(_original_enter)
def _enter(self):
    if step_context.current_recorder() is None:
        live = step_context.take_live_request()
        if live is not None:
            live.start()
    setattr(self, _WINDOW, [position(), None])
    eager_trace.tape_opened(self)
    return _original_enter(self)


@functools.wraps(_original_exit)
def _exit(self, *exc_info):
    window = getattr(self, _WINDOW, None)
    if window is not None:
        window[1] = position()
    eager_trace.tape_closed(self)
    return _original_exit(self, *exc_info)


@functools.wraps(_original_watch)
def _watch(self, tensor):
    eager_trace.tape_watched(self, tensor)
    return _original_watch(self, tensor)


@functools.wraps(_original_gradient)
def _gradient(self, target, sources, *args, **kwargs):
    start, end = getattr(self, _WINDOW, None) or (None, None)
    window = (start, end if end is not None else position())
    recorder = step_context.current_recorder()
    if recorder is not None:
        with recorder.backward(target, window):
            return _original_gradient(self, target, sources, *args, **kwargs)
    step_context.note_loss(target, window)
    return eager_trace.gradient(self, _original_gradient, target, sources, *args, **kwargs)


def install_tape_hook() -> None:
    """Install the hooks (idempotent). Outside a watched step they only note and forward."""
    tf.GradientTape.gradient = _gradient
    tf.GradientTape.__enter__ = _enter
    tf.GradientTape.__exit__ = _exit
    tf.GradientTape.watch = _watch
