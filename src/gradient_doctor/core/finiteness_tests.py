"""The script's own tests of a value's finiteness, noticed when they find one that is not.

A loop that tests its loss and skips the batch (`if torch.isnan(loss): continue`), stops
(`break`, `sys.exit(1)`) or raises before computing its gradients never hands the doctor
a non-finite gradient: the update it would have checked is never asked for. So while
the doctor watches, the framework's finiteness tests (each adapter names them: PyTorch's
`isnan`, `isinf`, `isfinite`; TensorFlow's `is_nan`, `is_inf`, `is_finite`), a tensor
compared with itself (`loss != loss`, true only for NaN), and Python's and NumPy's
`isnan`, `isinf` and `isfinite` of a number, called from the user's own code, are
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

import builtins
import functools
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType

from gradient_doctor.core.attribute_patches import AttributePatches
from gradient_doctor.core.source_frames import user_line
from gradient_doctor.errors import TrainingStopped

# Python's and NumPy's tests of a number: (name, True when its answer means "finite").
_NUMBER_TESTS = (("isnan", False), ("isinf", False), ("isfinite", True))


@dataclass(frozen=True)
class TensorTests:
    """What an adapter follows, and how to read it.

    Attributes:
        tests: (module or class, function name, True when its answer means "finite").
        self_comparisons: (class, method name) of comparisons that, made between a
            tensor and itself, are true only where it holds NaN (`loss != loss`).
        loss_like: whether a tested tensor may be a loss, a scalar (asked before the
            test's answer is read: reading it may cost a device sync).
        true: a scalar test's answer as a bool.
        is_user: whether a file is the user's code.
    """

    tests: tuple[tuple[object, str, bool], ...]
    self_comparisons: tuple[tuple[type, str], ...]
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
        self._patches = AttributePatches()
        self._busy = False

    def install(self) -> None:
        if self._patches.installed:
            return
        for owner, name, says_finite in self._tensors.tests:
            self._patches.replace(owner, name, self._tensor_test(getattr(owner, name), says_finite))
        for owner, name in self._tensors.self_comparisons:
            self._patches.replace(owner, name, self._self_comparison(getattr(owner, name)))
        import numpy  # here, not at the top: the core loads no numerical library itself

        ufuncs = {}
        for name, says_finite in _NUMBER_TESTS:
            self._patches.replace(math, name, self._number_test(getattr(math, name), says_finite))
            ufunc = ufuncs[name] = getattr(numpy, name)
            test = self._number_test(ufunc, says_finite, depth=2)  # called by _FollowedUfunc
            self._patches.replace(numpy, name, _FollowedUfunc(ufunc, test))
        self._patches.replace(builtins, "__import__", _with_ufuncs(builtins.__import__, ufuncs))

    def uninstall(self) -> None:
        self._patches.restore()

    def _tensor_test(self, original, says_finite: bool):
        tensors = self._tensors

        @functools.wraps(original)
        def test(tensor, *args, **kwargs):
            result = original(tensor, *args, **kwargs)
            if not self._busy and tensors.loss_like(tensor) and self._from_user(sys._getframe(1)):
                if tensors.true(result) != says_finite:
                    self._found([tensor], sys._getframe(1))
            return result

        return test

    def _self_comparison(self, original):
        tensors = self._tensors

        @functools.wraps(original)
        def compare(tensor, other):
            result = original(tensor, other)
            if other is tensor and not self._busy and tensors.loss_like(tensor):
                if self._from_user(sys._getframe(1)) and tensors.true(result):
                    self._found([tensor], sys._getframe(1))
            return result

        return compare

    def _number_test(self, original, says_finite: bool, depth: int = 1):
        """A test of a number (Python's; NumPy's of a scalar, its answer a NumPy bool):
        what its caller held is handed on, since a number holds no loss. `depth`: the
        frames from the test up to its caller."""

        @functools.wraps(original)
        def test(value, *args, **kwargs):
            result = original(value, *args, **kwargs)
            if not isinstance(result, bool) and type(result).__name__ not in ("bool", "bool_"):
                return result  # an array's test (NumPy's answer for a number: `numpy.bool`)
            if (not result if says_finite else result) and not self._busy:
                caller = sys._getframe(depth)
                if self._from_user(caller):
                    self._found([value, *caller.f_locals.values()], caller)
            return result

        return test

    def _from_user(self, caller: FrameType | None) -> bool:
        """Whether a test's caller is the user's code."""
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


def _with_ufuncs(original_import: Callable, ufuncs: dict) -> Callable:
    """`__import__` that puts NumPy's own ufuncs back while a module is imported: a C
    extension imported later (ml_dtypes, under TensorFlow imported after torch) registers
    loops on `numpy.isfinite` and reads it as a ufunc, which the stand-in is not."""
    import numpy

    importing = [False]

    @functools.wraps(original_import)
    def imported(*args, **kwargs):
        if importing[0]:
            return original_import(*args, **kwargs)
        importing[0] = True
        followed = {name: getattr(numpy, name) for name in ufuncs}
        for name, ufunc in ufuncs.items():
            setattr(numpy, name, ufunc)
        try:
            return original_import(*args, **kwargs)
        finally:
            for name, stand_in in followed.items():
                setattr(numpy, name, stand_in)
            importing[0] = False

    return imported


class _FollowedUfunc:
    """A NumPy ufunc (`numpy.isnan`) that calls `test` instead, and reads as the ufunc
    otherwise (`numpy.isnan.nin`, `.reduce`, its name and documentation)."""

    def __init__(self, ufunc, test: Callable) -> None:
        self._ufunc = ufunc
        self._test = test
        self.__name__ = ufunc.__name__
        self.__doc__ = ufunc.__doc__

    def __call__(self, *args, **kwargs):
        return self._test(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._ufunc, name)

    def __repr__(self) -> str:
        return repr(self._ufunc)
