"""Every optimizer update of a script, checked before it runs and skipped when not finite.

`gradient-doctor run` cannot wrap a step function: the user's loop may be anywhere (a
module-level loop, a method, gradient accumulation, a GAN's two optimizers). What every
loop has in common is `optimizer.step()`, and torch calls the global optimizer step
hooks around each one. Before each update, one fused check (`step_check.check`) reads
that optimizer's gradients and the losses `backward()` was called on since the last
update (each micro-batch's, under gradient accumulation); when anything
is not finite, the gradients are hidden from the optimizer for that update (each
`.grad` set to None, which every torch optimizer skips) and put back after it, so the
weights and the optimizer's state stay those of the last good step and the user's
code is untouched. An optimizer whose `step` the user wrote may read every `.grad`:
its update runs, and the parameters and state copied before it are put back after.
A healthy update is only read, never written: training computes exactly what it
computes unwatched.

A step with a closure (`optimizer.step(closure)`: LBFGS, or SGD handed one) computes its
losses and gradients inside the step, so it is checked after it ran: each evaluation
of the closure is noted, and the last one's loss, the gradients and the parameters
are checked after the step. A step that left any of them non-finite is undone (the
parameters and the optimizer's state copied before the step are put back), so the
weights stay those of the last good step there too, at the price of that copy on
each closure step.

A script with no torch optimizer at all updates its tensors itself (`w -= lr * w.grad`
under `torch.no_grad()`, as PyTorch's own autograd tutorial does). There, each
`backward()` is an update (`ManualUpdate` stands in for the optimizer: the leaf tensors
that backward reached), checked right after it, before the user's code reads the
gradients; a non-finite one has its gradients set to zero in place, so the user's own
update moves nothing, and the report says so.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import os
import sys
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.finiteness_tests import FinitenessTests, TensorTests
from gradient_doctor.torch_adapter.hooks.optimizer_sites import step_code
from gradient_doctor.torch_adapter.localize import source_lines
from gradient_doctor.torch_adapter.step.step_check import (
    Check,
    check,
    dense_gradients,
    dense_grads,
    dense_parameters,
    keeps_squares,
    parameters_with_grads,
)

# Where torch's own optimizers are defined (their `step` skips a missing gradient).
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
# The `backward()` roots kept between two updates (a long accumulation keeps its latest).
_ROOTS_KEPT = 64


@dataclass
class Update:
    """One call of `optimizer.step()` as the hooks saw it.

    Attributes:
        index: 0-based count of the updates of the run, over every optimizer.
        optimizer: the optimizer that stepped.
        check: what the check read (for a step with a closure, read after it ran), or
            None before that.
        present: how many dense gradients the update was about to apply (with a
            closure, counted after it ran): a change tells the owner to look for
            parameters left without one. None when no `backward()` of this update ran
            (the script stopped on its loss first): its gradients were not counted.
        hidden: the gradients hidden from the optimizer while a non-finite update
            ran, `(parameter, gradient)`, put back after it.
        undone: for a non-finite update of an optimizer whose `step` is not torch's
            own (it may not skip a missing gradient), what it started from, put back
            after it ran.
        parameters: the parameters whose gradients were checked, in the check's order.
        unmade: the script never called this update's `step()`: it stopped first, on
            gradients it found not finite itself (`UpdateHooks.unmade_update`).
    """

    index: int
    optimizer: torch.optim.Optimizer
    check: Check | None
    present: int | None = 0
    hidden: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    parameters: list[torch.Tensor] = field(default_factory=list)
    closure: _ClosureStep | None = None
    undone: _ClosureStep | None = None
    unmade: bool = False

    @property
    def skipped(self) -> bool:
        """The update was not applied: its loss or gradients were not finite."""
        return self.check is not None and not self.check.finite


@dataclass
class _ClosureStep:
    """A step with a closure: the state it started from, and its closure's losses.

    Attributes:
        parameters: the optimizer's parameters, and a copy of each from before the step.
        state: a copy of the optimizer's `state_dict()` from before the step.
        losses: what each evaluation of the closure returned, in order.
    """

    parameters: list[tuple[torch.Tensor, torch.Tensor]]
    state: dict
    losses: list = field(default_factory=list)

    @classmethod
    def before(cls, optimizer: torch.optim.Optimizer) -> _ClosureStep:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        with torch.no_grad():
            copies = [(p, p.detach().clone()) for p in params]
        return cls(copies, copy.deepcopy(optimizer.state_dict()))

    def wrapped(self, closure: Callable) -> Callable:
        """`closure`, noting what each evaluation returns."""

        @functools.wraps(closure)
        def noted(*args, **kwargs):
            loss = closure(*args, **kwargs)
            self.losses.append(loss)
            return loss

        return noted

    def checked(self, optimizer: torch.optim.Optimizer) -> Check:
        """The step as it left things: its last loss and the gradients, checked as any
        update's, and the parameters; not finite when any of them is not."""
        last = self.losses[-1] if self.losses else None
        losses = [last] if isinstance(last, torch.Tensor) else []
        result = check(losses, dense_grads(optimizer))
        params = [p for p, _ in self.parameters if p.layout == torch.strided]
        if result.finite and params:
            with torch.no_grad():
                norms = torch.stack(torch._foreach_norm(params)).tolist()
            if not all(math.isfinite(norm) for norm in norms):
                return Check(False, result.loss, result.grad_norm)
        return result

    def undo(self, optimizer: torch.optim.Optimizer) -> None:
        """Put the parameters and the optimizer's state back as they were before."""
        with torch.no_grad():
            for parameter, saved in self.parameters:
                parameter.copy_(saved)
        optimizer.load_state_dict(self.state)


def skips_missing_gradients(optimizer: torch.optim.Optimizer) -> bool:
    """Whether `optimizer`'s `step` is torch's own, which passes over a parameter whose
    `.grad` is None; a step the user wrote may read every `.grad` (and fail on None)."""
    code = step_code(optimizer)
    return code is not None and code.co_filename.startswith(_TORCH_DIR)


class ManualUpdate:
    """Stands in for an optimizer where the script updates its tensors itself: one param
    group of the leaf tensors the latest `backward()` gave a gradient, in the order they
    were first seen (what the checks, statistics and recorders read of an optimizer)."""

    def __init__(self) -> None:
        self.param_groups: list[dict] = [{"params": []}]
        self.defaults: dict = {}
        self.state: dict = {}
        self.backward_line: SourceLine | None = None  # the user's latest backward() call
        self._order: dict[int, int] = {}

    def reached(self, leaves: list[torch.Tensor]) -> None:
        """Make `leaves` (those one backward reached) its parameters, in a stable order."""
        for leaf in leaves:
            self._order.setdefault(id(leaf), len(self._order))
        self.param_groups[0]["params"] = sorted(leaves, key=lambda t: self._order[id(t)])


def _loss_like(tensor: object) -> bool:
    return isinstance(tensor, torch.Tensor) and tensor.grad_fn is not None and tensor.numel() == 1


# PyTorch's finiteness tests, as functions and as tensor methods.
FINITENESS_TESTS = TensorTests(
    tests=tuple(
        (owner, name, name == "isfinite")
        for name in ("isnan", "isinf", "isfinite")
        for owner in (torch, torch.Tensor)
    ),
    self_comparisons=((torch.Tensor, "__ne__"),),
    loss_like=_loss_like,
    true=lambda answer: bool(answer.all()),
    is_user=source_lines.is_user_file,
)


def _nonfinite_loss(value: object) -> bool:
    """A loss the script computed: a floating scalar tensor with an autograd history,
    holding a value that is not finite."""
    return (
        _loss_like(value)
        and value.is_floating_point()
        and not value.is_meta
        and not bool(torch.isfinite(value.detach()).all())
    )


def graph_leaves(root: torch.Tensor) -> list[torch.Tensor]:
    """The leaf tensors that `root.backward()` accumulates gradients into (the
    `AccumulateGrad` nodes of its graph), each once."""
    leaves: list[torch.Tensor] = []
    if root.grad_fn is None:
        return [root] if root.requires_grad else []
    seen: set[int] = set()
    pending = [root.grad_fn]
    while pending:
        node = pending.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            leaves.append(variable)
            continue
        pending.extend(child for child, _ in node.next_functions)
    return leaves


class UpdateListener:
    """What the hooks tell their owner; both methods do nothing by default."""

    def before_update(self, index: int, optimizer: torch.optim.Optimizer) -> None:
        """Called before update `index` is checked (the doctor's own ops follow)."""

    def after_update(self, update: Update) -> None:
        """Called after the update ran (or was skipped), its gradients put back."""


class UpdateHooks:
    """The global optimizer step hooks and the note of the last `backward()` root.

    Installed before the script builds its optimizers (as `run` installs them): a
    `backward()` while none was built or stepped is the script's own update.

    Args:
        listener: told of each update (`UpdateListener`).
    """

    def __init__(self, listener: UpdateListener) -> None:
        self.listener = listener
        self.updates = 0  # updates seen so far, over every optimizer
        # The script's own updates, while no torch optimizer was built (`ManualUpdate`).
        self.manual = ManualUpdate()
        self._optimizers_built = 0
        self._built: list[weakref.ref] = []  # the optimizers built since install
        self._optimizer_init = None
        self._tensor_backward = None
        self._in_tensor_backward = False
        # The roots `backward()` was called on since the last update (every micro-batch's
        # loss under gradient accumulation), the latest last; at most `_ROOTS_KEPT`.
        self.roots: list[torch.Tensor] = []
        self._current: Update | None = None
        self._handles: list = []
        self._backward: Callable | None = None
        # The script's own finiteness tests: one that finds its loss (or, after a
        # `backward()`, a value of its gradients: their norm) not finite ends the step
        # there (`_tested`), before the script skips or stops.
        self._tests = FinitenessTests(
            self._tested, dataclasses.replace(FINITENESS_TESTS, loss_like=self._testable)
        )
        self._told: dict[int, weakref.ref] = {}  # the losses already told, by id
        # A GradScaler was built: a step whose scaled gradients overflowed is skipped on
        # purpose, and a script may test their norm to skip it too.
        self._scaled = False
        self._scaler_init = None
        self._scaler_step = None
        # Updates a GradScaler skipped itself (its scaled gradients overflowed).
        self.scaler_skipped = 0

    def install(self) -> None:
        """Register the hooks and note the roots of `torch.autograd.backward` (which
        `Tensor.backward` calls) from now on."""
        if self._handles:
            return
        self._handles = [
            register_optimizer_step_pre_hook(self._pre_hook),
            register_optimizer_step_post_hook(self._post_hook),
        ]
        self._tests.install()
        backward = self._backward = torch.autograd.backward

        @functools.wraps(backward)
        def noting_backward(tensors, *args, **kwargs):
            if isinstance(tensors, torch.Tensor):
                root = tensors
            elif tensors:
                root = next(
                    (t for t in reversed(tuple(tensors)) if isinstance(t, torch.Tensor)), None
                )
            else:
                root = None
            if root is not None:
                self.roots = [*self.roots[1 - _ROOTS_KEPT :], root]
            if self._in_tensor_backward:  # `Tensor.backward`'s wrapper checks it
                return backward(tensors, *args, **kwargs)
            return self._maybe_manual(root, kwargs, lambda: backward(tensors, *args, **kwargs))

        torch.autograd.backward = noting_backward
        tensor_backward = self._tensor_backward = torch.Tensor.backward

        @functools.wraps(tensor_backward)
        def checking_backward(tensor, *args, **kwargs):
            # Outside `Tensor.backward`'s own torch-function dispatch (which calls this
            # again, inside a mode): the check after it may end a torch-function mode
            # (the sampled forward's) safely only there.
            if self._in_tensor_backward:
                return tensor_backward(tensor, *args, **kwargs)
            self._in_tensor_backward = True
            try:
                return self._maybe_manual(
                    tensor, kwargs, lambda: tensor_backward(tensor, *args, **kwargs)
                )
            finally:
                self._in_tensor_backward = False

        torch.Tensor.backward = checking_backward
        init = self._optimizer_init = torch.optim.Optimizer.__init__

        @functools.wraps(init)
        def counting_init(optimizer, *args, **kwargs):
            self._optimizers_built += 1
            self._built.append(weakref.ref(optimizer))
            return init(optimizer, *args, **kwargs)

        torch.optim.Optimizer.__init__ = counting_init
        scaler_init = self._scaler_init = torch.amp.GradScaler.__init__

        @functools.wraps(scaler_init)
        def noting_scaler(scaler, *args, **kwargs):
            scaler_init(scaler, *args, **kwargs)
            self._scaled = self._scaled or bool(getattr(scaler, "_enabled", True))

        torch.amp.GradScaler.__init__ = noting_scaler
        scaler_step = self._scaler_step = torch.amp.GradScaler.step

        @functools.wraps(scaler_step)
        def counting_step(scaler, optimizer, *args, **kwargs):
            before = self.updates
            result = scaler_step(scaler, optimizer, *args, **kwargs)
            if self.updates == before and scaler.is_enabled():
                # It found the scaled gradients not finite and skipped the update on
                # purpose: counted, and the scaled losses of that step are forgotten
                # (they belong to no update the doctor checks).
                self.scaler_skipped += 1
                self.roots = []
            return result

        torch.amp.GradScaler.step = counting_step

    def uninstall(self) -> None:
        """Remove the hooks and give `torch.autograd.backward` back."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._tests.uninstall()
        if self._backward is not None:
            torch.autograd.backward, self._backward = self._backward, None
        if self._optimizer_init is not None:
            torch.optim.Optimizer.__init__, self._optimizer_init = self._optimizer_init, None
        if self._tensor_backward is not None:
            torch.Tensor.backward, self._tensor_backward = self._tensor_backward, None
        if self._scaler_init is not None:
            torch.amp.GradScaler.__init__, self._scaler_init = self._scaler_init, None
        if self._scaler_step is not None:
            torch.amp.GradScaler.step, self._scaler_step = self._scaler_step, None
        self.roots = []

    def _testable(self, tensor: object) -> bool:
        """A tensor whose own test by the script is looked at: a loss, or, while the
        gradients of a `backward()` wait for their update (no GradScaler built), any
        floating scalar (their norm, `clip_grad_norm_`'s answer)."""
        if _loss_like(tensor):
            return True
        return (
            bool(self.roots)
            and not self._scaled
            and isinstance(tensor, torch.Tensor)
            and tensor.numel() == 1
            and tensor.is_floating_point()
        )

    def _tested(self, held: Sequence[object]) -> None:
        """The script's own test found a value not finite: the update of its loss among
        `held`, else (a `backward()`'s gradients waiting, no GradScaler built) the update
        of those gradients when they are not finite, is told as one the script never
        made."""
        if self.unmade_update(False, held):
            return
        if self.roots and not self._scaled:
            self._unmade_gradients()

    def _maybe_manual(self, root: torch.Tensor | None, kwargs: dict, run: Callable):
        """Run a `backward()` (`run`); in a script that built no optimizer, the update of
        the leaves it reached (`_manual_update`) follows it."""
        manual = (
            root is not None
            and not self._optimizers_built
            and not kwargs.get("inputs")
            and not root.is_meta  # a shape pass: no values to check
            # Keras on its torch backend updates through its own optimizers, which the
            # doctor does not watch there (`run` says so): not the script's own update.
            and "keras" not in sys.modules
        )
        leaves = [t for t in graph_leaves(root) if not t.is_meta] if manual else []
        if leaves:
            self.manual.backward_line = source_lines.user_line()
        result = run()
        if leaves:
            self._manual_update(leaves)
        return result

    def _manual_update(self, leaves: list[torch.Tensor]) -> None:
        """A `backward()` of a script with no optimizer: an update of the leaves it
        reached, checked now, before the script's own code reads their gradients; not
        finite, those gradients are set to zero in place (the script's update of them
        then moves nothing)."""
        index = self.updates
        self.updates += 1
        self.manual.reached(leaves)
        self.listener.before_update(index, self.manual)
        params, grads = dense_gradients(self.manual)
        roots, self.roots = self.roots, []
        result = check(roots, grads)
        update = Update(index, self.manual, result, len(params), parameters=params)
        if not result.finite:
            with torch.no_grad():
                for parameter in parameters_with_grads(self.manual):
                    parameter.grad.zero_()
        self.listener.after_update(update)

    def unmade_update(self, error: bool, held: Sequence[object] = ()) -> bool:
        """The update the script never made, because it stopped first, when what it
        stopped on is not finite; told to the listener as one skipped.

        After an error, that is the gradients `backward()` wrote since the last update
        and no update applied (the script's own check of them raised,
        `clip_grad_norm_(error_if_nonfinite=True)`), for the optimizer built over those
        parameters (the first, of several, whose gradients are not finite). Not after a
        clean end: a step skipped on purpose last (a GradScaler's, on overflowing float16
        gradients) leaves non-finite gradients behind that no one stopped on.

        After any end, it is a loss the script computed and still holds (`held`: the
        values of its frames), not finite, with no `backward()` since (it read the loss,
        found it not finite and stopped: `if loss != loss: break`), for the optimizer
        over the parameters it came from. So it is, before any end, when the script's
        own test of it found it not finite (`FinitenessTests`: `if torch.isnan(loss):
        continue`); a loss told once is not told again. True when an update was told.
        """
        if error and self.roots and self._unmade_gradients():
            return True
        losses = [
            (t, {id(leaf) for leaf in graph_leaves(t)})
            for t in held
            if _nonfinite_loss(t) and not self._was_told(t)
        ]
        if not losses:  # a NaN in the data a script tests and drops, most often
            return False
        for optimizer in self._built_optimizers():
            params = {id(p) for group in optimizer.param_groups for p in group["params"]}
            reaching = [t for t, leaves in losses if leaves & params]
            if reaching:
                self._told.update((id(t), weakref.ref(t)) for t in reaching)
                self.roots = reaching
                self._tell_unmade(optimizer, check(reaching, []), [], [])
                return True
        return False

    def _was_told(self, loss: torch.Tensor) -> bool:
        """Whether `loss` was told as an unmade update already (a script that tested it,
        then went on, still holds it when it ends)."""
        ref = self._told.get(id(loss))
        return ref is not None and ref() is loss

    def _unmade_gradients(self) -> bool:
        """Tell the update of the first optimizer whose pending gradients are not finite."""
        for optimizer in self._built_optimizers():
            params, grads = dense_gradients(optimizer)
            if not grads:
                continue
            result = check(self.roots, grads, keeps_squares(optimizer))
            if not result.finite:
                self._tell_unmade(optimizer, result, params, grads)
                return True
        return False

    def _built_optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizers built while the hooks were in, still alive, oldest first."""
        return [o for o in (ref() for ref in self._built) if o is not None]

    def _tell_unmade(self, optimizer, result: Check, params: list, grads: list) -> None:
        index = self.updates
        self.updates += 1
        self.listener.before_update(index, optimizer)
        self.roots = []
        present = len(grads) if grads else None  # a loss's: no backward() ran
        self.listener.after_update(
            Update(index, optimizer, result, present, parameters=params, unmade=True)
        )

    def _pre_hook(self, optimizer, args, kwargs) -> tuple | None:
        self._optimizers_built = max(self._optimizers_built, 1)  # one built before install
        index = self.updates
        self.updates += 1
        self.listener.before_update(index, optimizer)
        if len(args) > 1 or kwargs:  # a closure recomputes the loss inside the step
            closure = args[1] if len(args) > 1 else kwargs.get("closure")
            update = self._current = Update(index, optimizer, None)
            self.roots = []  # its own roots are its closure's
            if not callable(closure):
                return None
            update.closure = _ClosureStep.before(optimizer)
            noted = update.closure.wrapped(closure)
            if len(args) > 1:
                return (args[0], noted, *args[2:]), kwargs
            return args, {**kwargs, "closure": noted}
        params, grads = dense_gradients(optimizer)
        roots, self.roots = self.roots, []
        result = check(roots, grads, keeps_squares(optimizer))
        update = self._current = Update(index, optimizer, result, len(grads), parameters=params)
        if not result.finite:
            # Its losses are told with it: a test of one after the update is no new one.
            self._told.update((id(t), weakref.ref(t)) for t in roots)
            if not skips_missing_gradients(optimizer):
                update.undone = _ClosureStep.before(optimizer)
                return None
            update.hidden = [(p, p.grad) for p in parameters_with_grads(optimizer)]
            for parameter, _ in update.hidden:
                parameter.grad = None

    def _post_hook(self, optimizer, args, kwargs) -> None:
        update, self._current = self._current, None
        if update is None or update.optimizer is not optimizer:
            return
        if update.closure is not None:
            update.check = update.closure.checked(optimizer)
            update.present = len(dense_parameters(optimizer))
            if not update.check.finite:
                update.closure.undo(optimizer)
        if update.undone is not None:
            update.undone.undo(optimizer)
        for parameter, grad in update.hidden:
            parameter.grad = grad
        self.listener.after_update(update)
