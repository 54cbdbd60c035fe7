"""The step's own numerics checks, and what the doctor does with them while it watches.

`tf.debugging.check_numerics` (and `assert_all_finite`, which calls it) raises on a NaN
or an infinity. Inside a compiled step that leaves the doctor nothing to read: Keras's
loop keeps no batch to replay, and a replay or a trial that meets the same values would
raise again before the gradients it is run for. So the step `fit` runs, every replay and
every trial trace the step with those checks handing their tensor on
(`numerics_checks_passed_through`), and the guard reads the step instead; a custom step
whose check raised anyway is recognised by its error (`stopped_by_numerics_check`).
`tf.debugging.enable_check_numerics()`, which checks every op (the doctor's own reads of
a failing step's values included), is left off (`check_numerics_left_to_the_doctor`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import tensorflow as tf

# The checks that raise on a NaN or an infinity, by their names in `tf.debugging`.
_NUMERICS_CHECKS = ("check_numerics", "assert_all_finite")


# Said once, the first time a model's step (traced for `fit`) hands a check's tensor on.
NUMERICS_CHECKS_NOTE = (
    "gradient-doctor: tf.debugging.check_numerics in the step `fit` runs hands its tensor "
    "on while the doctor watches: the doctor stops at the first non-finite loss or "
    "gradient, which the step's values reach, and names the op that made it"
)
_announced = False


@contextmanager
def numerics_checks_passed_through(announce: bool = False) -> Iterator[None]:
    """`tf.debugging.check_numerics` and `assert_all_finite` return their tensor unchecked
    while the block runs (the first such call said on stderr when `announce`)."""

    def passed_through(tensor, *args, **kwargs):
        global _announced
        if announce and not _announced:
            _announced = True
            print(NUMERICS_CHECKS_NOTE, file=sys.stderr, flush=True)
        return tensor

    saved = {name: getattr(tf.debugging, name) for name in _NUMERICS_CHECKS}
    for name in _NUMERICS_CHECKS:
        setattr(tf.debugging, name, passed_through)
    try:
        yield
    finally:
        for name, function in saved.items():
            setattr(tf.debugging, name, function)


def stopped_by_numerics_check(error: BaseException) -> bool:
    """Whether `error` is a numerics check's (`tf.debugging.check_numerics`, which says
    "Tensor had NaN values" or "Tensor had Inf values"): the step found one itself."""
    return isinstance(error, tf.errors.InvalidArgumentError) and (
        "Tensor had NaN values" in str(error) or "Tensor had Inf values" in str(error)
    )


def check_numerics_left_to_the_doctor(*args, **kwargs) -> None:
    """`tf.debugging.enable_check_numerics()`, not turned on while the doctor watches.

    It would raise at the first op anywhere that writes a NaN or an infinity, the
    doctor's own reads of a failing step's values included, before the doctor could
    name the op or write its reports. The doctor stops at the first non-finite loss or
    gradient, before it reaches the weights, and names the op that made it. (Values
    that never reach the loss or a gradient, which it would also stop on, do not stop
    a watched run.)"""
    print(
        "gradient-doctor: tf.debugging.enable_check_numerics() is left off while the "
        "doctor watches: the doctor stops at the first non-finite loss or gradient itself "
        "and names the op that made it (run your script without the doctor to use it)",
        file=sys.stderr,
        flush=True,
    )
