"""Let the doctor see each `tape.gradient` target (the step's loss) and what the tape recorded.

In plain eager code the tape's events also go to `eager_trace`, which traces the step.
"""

from __future__ import annotations

import functools
import linecache

import tensorflow as tf

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.source_frames import display_path, is_user_file
from gradient_doctor.tf_adapter._tf_internals import tape_flags, tf_stack, variable_handle
from gradient_doctor.tf_adapter.hooks import eager_trace
from gradient_doctor.tf_adapter.localize import step_context

_original_gradient = tf.GradientTape.gradient
_original_enter = tf.GradientTape.__enter__
_original_exit = tf.GradientTape.__exit__
_original_watch = tf.GradientTape.watch
_WINDOW = "_gradient_doctor_window"
# The user's `tape.gradient(...)` line of the latest call that returned None for a
# source, by the source's id: read when the update of those variables finds them
# without a gradient (one entry per variable at most).
_none_sites: dict[int, SourceLine] = {}
# The sources of those calls that the tape was not watching: it was made with
# `watch_accessed_variables=False` and they were never handed to `tape.watch`.
_unwatched: set[int] = set()


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
    grads = eager_trace.gradient(self, _original_gradient, target, sources, *args, **kwargs)
    step_context.note_loss(target, window, grads, sources)
    if grads is None or (isinstance(grads, list | tuple) and any(g is None for g in grads)):
        _note_none(self, sources, grads)
    return grads


def _note_none(tape, sources, grads) -> None:
    """Remember the user's line of this gradient call for each source it gave None, and
    which of those sources the tape was not watching."""
    _, watches_reads, _ = tape_flags(tape)
    watched = set() if watches_reads else {id(variable_handle(v)) for v in tape.watched_variables()}
    site = _user_call_site()
    for source, grad in zip(tf.nest.flatten(sources), tf.nest.flatten(grads), strict=False):
        if grad is None:
            if site is not None:
                _none_sites[id(source)] = site
            if watches_reads or id(variable_handle(source)) in watched:
                _unwatched.discard(id(source))
            else:
                _unwatched.add(id(source))


def _user_call_site() -> SourceLine | None:
    """The innermost user frame of the stack, as the user wrote it (TensorFlow maps the
    code AutoGraph generates back to the user's lines)."""
    for frame in reversed(tf_stack.extract_stack()):
        if is_user_file(frame.filename):
            code = linecache.getline(frame.filename, frame.lineno).strip()
            return SourceLine(display_path(frame.filename), frame.lineno, code)
    return None


def gradient_call_of(variables) -> SourceLine | None:
    """The user's `tape.gradient(...)` line that last returned None for one of
    `variables`, when all of them were given None there; else None."""
    sites = {_none_sites.get(id(variable)) for variable in variables}
    return sites.pop() if len(sites) == 1 else None


def unwatched(variables) -> bool:
    """Whether every one of `variables` got None from a tape that was not watching it
    (made with `watch_accessed_variables=False`, and it never went to `tape.watch`)."""
    return bool(variables) and all(id(variable) in _unwatched for variable in variables)


# How many holders want the hooks in place (each watcher holds them once).
_holders = 0


def install_tape_hook() -> None:
    """Put the hooks in place for one more holder (a watcher); the first installs them.
    Outside a watched step they only note and forward."""
    global _holders
    _holders += 1
    tf.GradientTape.gradient = _gradient
    tf.GradientTape.__enter__ = _enter
    tf.GradientTape.__exit__ = _exit
    tf.GradientTape.watch = _watch


def uninstall_tape_hook() -> None:
    """Release one holder's hold; when none is left, `tf.GradientTape` is TensorFlow's own
    again (and the remembered `tape.gradient` lines are dropped)."""
    global _holders
    _holders = max(_holders - 1, 0)
    if _holders:
        return
    tf.GradientTape.gradient = _original_gradient
    tf.GradientTape.__enter__ = _original_enter
    tf.GradientTape.__exit__ = _original_exit
    tf.GradientTape.watch = _original_watch
    _none_sites.clear()
    _unwatched.clear()
