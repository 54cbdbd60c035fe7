"""Let the doctor see each `tape.gradient` target: the step's loss, and the backward pass."""

from __future__ import annotations

import functools

import tensorflow as tf

from gradient_doctor.tf_adapter import step_context

_original_gradient = tf.GradientTape.gradient


@functools.wraps(_original_gradient)
def _gradient(self, target, sources, *args, **kwargs):
    recorder = step_context.current_recorder()
    if recorder is not None:
        with recorder.backward(target):
            return _original_gradient(self, target, sources, *args, **kwargs)
    step_context.note_loss(target)
    return _original_gradient(self, target, sources, *args, **kwargs)


def install_tape_hook() -> None:
    """Install the hook (idempotent). Outside a watched step it only forwards the call."""
    tf.GradientTape.gradient = _gradient
