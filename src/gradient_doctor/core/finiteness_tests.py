"""The script's own tests of a value's finiteness, noticed when they find one that is not.

A loop that tests its loss and skips the batch (`if torch.isnan(loss): continue`), stops
(`break`, `sys.exit(1)`) or raises before computing its gradients never hands the doctor
a non-finite gradient: the update it would have checked is never asked for. So while
the doctor watches, the framework's finiteness tests (each adapter names them: PyTorch's
`isnan`, `isinf`, `isfinite`; TensorFlow's `is_nan`, `is_inf`, `is_finite`) and Python's
`math.isnan`, `math.isinf` and `math.isfinite`, called from the user's own code, are
followed: when one finds a value that is not finite, what the test's caller held (the
tested tensor itself, for a tensor's test) is handed to `on_nonfinite`, which looks among
it for a loss. That step is then the failing one, found where the script found it, and
training stops there as it stops at an update: before the script skips the batch,
prints or exits.

Only a test of a tensor the adapter takes for a value of the step (a loss: a scalar with
an autograd history, or one the traced step made; or the gradients' norm, tested before
their update) that finds something is looked at further; a test of anything else (a
batch, a metric, a mask of -inf scores) costs a few attribute reads.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType

from gradient_doctor.core.source_frames import user_line
from gradient_doctor.errors import TrainingStopped

_MATH_TESTS = (("isnan", False), ("isinf", False), ("isfinite", True))


@dataclass(frozen=True)
class TensorTests:
    """What an adapter follows, and how to read it.

    Attributes:
        tests: (module or class, function name, True when its answer means "finite").
        loss_like: whether a tested tensor may be a loss, a scalar (asked before the
            test's answer is read: reading it may cost a device sync).
        true: a scalar test's answer as a bool.
        is_user: whether a file is the user's code.
    """

    tests: tuple[tuple[object, str, bool], ...]
    loss_like: Callable[[object], bool]
    true: Callable[[object], bool]
    is_user: Callable[[str], bool]


class FinitenessTests:
    """Follows the finiteness tests while installed (installing twice is installing once).

    Args:
        on_nonfinite: called with what the caller held when a test from the user's code
            found a value that is not finite.
        tensors: the adapter's tests and how to read them.
    """

    def __init__(
        self, on_nonfinite: Callable[[Sequence[object]], None], tensors: TensorTests
    ) -> None:
        self._on_nonfinite = on_nonfinite
        self._tensors = tensors
        self._saved: list[tuple[object, str, object]] = []
        self._busy = False

    def install(self) -> None:
        if self._saved:
            return
        for owner, name, says_finite in self._tensors.tests:
            self._replace(owner, name, self._tensor_test(getattr(owner, name), says_finite))
        for name, says_finite in _MATH_TESTS:
            self._replace(math, name, self._number_test(getattr(math, name), says_finite))

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved = []

    def _replace(self, owner, name: str, value) -> None:
        self._saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def _tensor_test(self, original, says_finite: bool):
        tensors = self._tensors

        @functools.wraps(original)
        def test(tensor, *args, **kwargs):
            result = original(tensor, *args, **kwargs)
            if not self._busy and tensors.loss_like(tensor) and self._from_user():
                if tensors.true(result) != says_finite:
                    self._found([tensor], sys._getframe(1))
            return result

        return test

    def _number_test(self, original, says_finite: bool):
        @functools.wraps(original)
        def test(value):
            result = original(value)
            if (not result if says_finite else result) and not self._busy and self._from_user():
                caller = sys._getframe(1)
                self._found(list(caller.f_locals.values()), caller)
            return result

        return test

    def _from_user(self) -> bool:
        caller = sys._getframe(2)  # the test's caller, past the wrapper
        return caller is not None and self._tensors.is_user(caller.f_code.co_filename)

    def _found(self, held: list, caller: FrameType) -> None:
        """Hand `held` on; when that stops training, say at which of the user's lines."""
        self._busy = True  # the doctor's own tests, while it looks, are not the script's
        try:
            self._on_nonfinite(held)
        except TrainingStopped:
            line = user_line(caller, self._tensors.is_user)
            if line is not None:
                print(
                    f"gradient-doctor: training stopped at your own finiteness test, "
                    f"{line.file}:{line.line} `{line.code}`, which found a value of that "
                    "step not finite",
                    file=sys.stderr,
                    flush=True,
                )
            raise
        finally:
            self._busy = False
