"""Gradients an optimizer applies again and again: `.grad` never reset between updates.

PyTorch adds each `backward()`'s gradients into `.grad`; only `zero_grad()` (or setting
`.grad` to None) starts them afresh. A script that resets them once per epoch, or
never, applies at every update the sum of every gradient since: the updates grow step
after step, and the loss diverges without any value going non-finite for a while.

Watching costs two counters per update: `Optimizer.zero_grad` and `Module.zero_grad`
count the resets, and each update notes its gradients' objects and version counters.
An update whose every gradient is the same tensor as at the optimizer's last update,
its version moved on (something was added into it), with no `zero_grad()` between, is
suspect. A manual reset (`p.grad.data.zero_()`, which moves no version counter) looks
the same, so a suspect is proved by values before anything is said: the next update's
incoming gradients are summed by tensor hooks, and its `.grad` must equal the last
update's plus them, and differ from them alone. An optimizer found reset is not
suspected again.
"""

from __future__ import annotations

import math

import torch

from gradient_doctor.core.attribute_patches import AttributePatches
from gradient_doctor.core.evidence import StaleGradients

# Updates in a row that look stale before the next is proved by values (one: an epoch
# of three updates between resets is still caught).
SUSPECT_AFTER = 1
# How close the `.grad` must come to the last update's plus the incoming gradients
# (relative to its norm), and how far from the incoming gradients alone.
_SAME = 1e-4
_APART = 1e-2


class _Probe:
    """The values a suspect update is proved by: the gradients as the last update
    applied them, and the incoming gradients since, summed by tensor hooks."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.params = params
        self.before = [p.grad.detach().clone() for p in params]
        self.incoming = [torch.zeros_like(p.grad) for p in params]
        self._handles = [p.register_hook(self._adder(i)) for i, p in enumerate(params)]

    def _adder(self, index: int):
        def add(grad: torch.Tensor) -> None:
            self.incoming[index].add_(grad.detach())

        return add

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def stale(self) -> tuple[float, float] | None:
        """(carried, fresh) norms when `.grad` is the last update's plus the incoming
        gradients and not the incoming ones alone; None otherwise."""
        with torch.no_grad():
            grads = [p.grad for p in self.params]
            if any(g is None or g.shape != b.shape for g, b in zip(grads, self.before)):
                return None
            total = _norm(grads)
            summed = _norm([g - b - i for g, b, i in zip(grads, self.before, self.incoming)])
            alone = _norm([g - i for g, i in zip(grads, self.incoming)])
            carried, fresh = _norm(self.before), _norm(self.incoming)
        if not (math.isfinite(total) and total > 0 and fresh > 0):
            return None
        if summed <= _SAME * total and alone >= _APART * total:
            return carried, fresh
        return None


def _norm(tensors: list[torch.Tensor]) -> float:
    return math.sqrt(sum(float(t.double().square().sum()) for t in tensors))


class GradientResets:
    """Counts `zero_grad()` calls and proves an optimizer's gradients stale."""

    def __init__(self) -> None:
        self.resets = 0
        self.found: StaleGradients | None = None
        self._patches = AttributePatches()
        # id(optimizer) -> (resets, [(grad id, version)], updates, suspect streak)
        self._last: dict[int, tuple[int, list[tuple[int, int]], int, int]] = {}
        self._probe: tuple[int, _Probe] | None = None
        # Optimizers a probe found reset (a script's own way, `p.grad.data.zero_()`):
        # not probed again, which would copy their gradients at every update.
        self._cleared: set[int] = set()

    def install(self) -> None:
        """Count the resets of both `zero_grad`s (an optimizer's, a module's)."""
        for owner in (torch.optim.Optimizer, torch.nn.Module):
            self._patches.replace(owner, "zero_grad", self._counting(owner.zero_grad))

    def uninstall(self) -> None:
        self._patches.restore()
        if self._probe is not None:
            self._probe[1].close()
            self._probe = None

    def _counting(self, original):
        def zero_grad(module_or_optimizer, *args, **kwargs):
            self.resets += 1
            return original(module_or_optimizer, *args, **kwargs)

        zero_grad.__wrapped__ = original
        return zero_grad

    def observe(
        self, optimizer: torch.optim.Optimizer, params: list[torch.Tensor]
    ) -> StaleGradients | None:
        """Take in an update that applied `params`' gradients (which it left as they
        were); the proof, once, when they were not reset since this optimizer's last."""
        key = id(optimizer)
        if self.found is not None or not params or key in self._cleared:
            return None
        seen = [(id(p.grad), p.grad._version) for p in params]
        last = self._last.get(key)
        updates = last[2] + 1 if last is not None else 0
        suspect = (
            last is not None
            and last[0] == self.resets
            and len(last[1]) == len(seen)
            and all(a[0] == b[0] and b[1] > a[1] for a, b in zip(last[1], seen))
        )
        streak = last[3] + 1 if suspect and last is not None else 0
        self._last[key] = (self.resets, seen, updates, streak)
        probe = self._probe
        if probe is not None and probe[0] == key:
            self._probe = None
            probe[1].close()
            if not suspect:  # a `zero_grad()` came between: nothing to prove this time
                return None
            proved = probe[1].stale()
            if proved is not None:
                self.found = StaleGradients(type(optimizer).__name__, updates, *proved)
                return self.found
            self._cleared.add(key)  # reset by the script's own means
            return None
        if streak >= SUSPECT_AFTER and self._probe is None:
            self._probe = (key, _Probe(params))
        return None
