"""Losses handed the wrong kind of score, seen on a sampled step (PyTorch).

`cross_entropy` and `binary_cross_entropy_with_logits` (and the `nn` losses that call
them) apply their own softmax or sigmoid; `nll_loss` (`nn.NLLLoss`) reads
log-probabilities. The sampled step's `TorchFunctionMode` (`module_stats`) hands this
module every softmax, sigmoid and log_softmax call and every call of those losses, the
model's and the loss code's alike:

- a loss that applies its own squash, handed a tensor that a softmax (or sigmoid) call
  of the step returned, squashes it twice: found at once, with the user's line of that
  squash (the patch removes it);
- `nll_loss` handed a tensor no log_softmax returned: its values are read on the first
  sampled calls at that line (one host copy each); a value above 0 is no
  log-probability.

Each is handed on once per loss line as a `LossInput` (`core/knowledge/rules/loss_input.py`
explains it). Everything is read, never written.
"""

from __future__ import annotations

import ast
import functools
import sys
import weakref
from collections.abc import Callable

import torch

from gradient_doctor.core import source_frames
from gradient_doctor.core.evidence import LossInput
from gradient_doctor.core.findings import SourceLine
from gradient_doctor.torch_adapter.localize import source_lines

# The torch functions that squash scores, by name (functions, methods and the `nn`
# modules' forwards all call these), and what each makes.
SQUASHES = {"softmax": "softmax", "sigmoid": "sigmoid", "log_softmax": "log_softmax"}
# The losses that apply their own squash, and which.
_SQUASHING_LOSSES = {"cross_entropy": "softmax", "binary_cross_entropy_with_logits": "sigmoid"}
# A softmax's or a sigmoid's output, in [0, 1]: squashed already, whichever the loss's own.
_SQUASHED = frozenset({"softmax", "sigmoid"})
_LOG_PROBABILITY_LOSS = "nll_loss"
# The modules that squash: their lines are where a model's own squash is built.
_SQUASH_MODULES = (torch.nn.Softmax, torch.nn.Sigmoid, torch.nn.LogSoftmax)
LOSSES = frozenset({*_SQUASHING_LOSSES, _LOG_PROBABILITY_LOSS})
# Sampled calls of one `nll_loss` line whose input values are read.
_LOOKS = 3


class LossInputs:
    """What each loss of a sampled step was handed, against what it reads.

    Args:
        on_found: called with each `LossInput` found (once per loss line).
    """

    def __init__(self, on_found: Callable[[LossInput], None]) -> None:
        self._on_found = on_found
        # id of a squash's output -> (the output, what made it, the user's line)
        self._made: dict[int, tuple[weakref.ref, str, SourceLine | None]] = {}
        self._looks: dict[tuple, int] = {}

    def squashed(self, name: str, output: object) -> None:
        """Note a softmax / sigmoid / log_softmax call's output."""
        if isinstance(output, torch.Tensor):
            self._made[id(output)] = (weakref.ref(output), SQUASHES[name], _squash_site())

    def loss(self, name: str, args: tuple, kwargs: dict) -> None:
        """Look at what loss `name` was handed as its input (scores)."""
        scores = args[0] if args else kwargs.get("input")
        if not isinstance(scores, torch.Tensor) or not scores.is_floating_point():
            return
        made = self._made.get(id(scores))
        made_by = made[1] if made is not None and made[0]() is scores else None
        squashing = name in _SQUASHING_LOSSES
        if squashing and made_by not in _SQUASHED:
            return  # logits, as it reads them: the healthy case, told at no more cost
        if not squashing and (made_by == "log_softmax" or not scores.numel()):
            return
        site, argument = _loss_site(name)
        key = (name, site.file, site.line) if site is not None else (name,)
        if self._looks.get(key, 0) >= _LOOKS:
            return
        if squashing:
            self._looks[key] = _LOOKS  # found: once per line
            own = _SQUASHING_LOSSES[name]
            self._found(name, "logits", own, site, argument, made_at=made[2], producer=made_by)
            return
        self._looks[key] = self._looks.get(key, 0) + 1
        with torch.no_grad():
            low, high = (float(value) for value in torch.aminmax(scores.detach().float()))
        if high > 0.0:
            self._looks[key] = _LOOKS
            self._found(
                name, "log-probabilities", "log_softmax", site, argument, values=(low, high)
            )

    def clear(self) -> None:
        """Forget the step's squashes (at the end of its forward and loss)."""
        self._made.clear()

    def _found(
        self, name, expects, activation, site, argument, made_at=None, values=None, producer=None
    ):
        self._on_found(
            LossInput(
                loss=name,
                expects=expects,
                activation=activation,
                producer=producer,
                loss_site=site,
                loss_argument=argument,
                values=values,
                made_at=made_at,
            )
        )


def _squash_site() -> SourceLine | None:
    """The user's line of the squash being handled now: for a squash module's
    (`nn.Softmax(dim=1)` in a `Sequential`), the one line of the user's file that builds
    it, when there is one; else the user's call."""
    return _built_or_called(_SQUASH_MODULES)[0]


def _loss_site(name: str) -> tuple[SourceLine | None, tuple[str, str]]:
    """The user's line that names loss `name`, and how (`LossInput.loss_argument`): for a
    loss module (`nn.NLLLoss()`) that calls it, the one line of the user's file that
    builds that module's class, when there is one; else the user's call."""
    site, module = _built_or_called((torch.nn.modules.loss._Loss,))
    return site, ("call", module or name)


def _built_or_called(modules: tuple[type, ...]) -> tuple[SourceLine | None, str | None]:
    """Out from the torch call being handled now, to the user's frame: the one line of
    the user's file that builds the innermost module of `modules` running it, with that
    module's class name, when there is such a line; else the user's line of the call
    and None."""
    frame = sys._getframe(1)
    module = None
    while frame is not None and not source_lines.is_user_file(frame.f_code.co_filename):
        owner = frame.f_locals.get("self")
        if module is None and isinstance(owner, modules):
            module = type(owner).__name__
        frame = frame.f_back
    if frame is None:
        return None, None
    built = _only_call(frame.f_code.co_filename, module) if module is not None else None
    if built is not None:
        return built, module
    return source_frames.user_line(frame, source_lines.is_user_file), None


@functools.lru_cache(maxsize=64)
def _only_call(filename: str, callee: str) -> SourceLine | None:
    """The line of the one call of `callee` (a class, by name) in the file, or None when
    the file calls it on no line, or on several."""
    try:
        with open(filename, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return None
    lines = {
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) == callee
    }
    if len(lines) != 1:
        return None
    (line,) = lines
    return source_frames.source_line(filename, line, line, None, None)
