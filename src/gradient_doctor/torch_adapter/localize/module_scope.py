"""Which module's `forward`, and which torch function the user called, is running while a
step is replayed."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves


def module_names(models: Iterable[torch.nn.Module]) -> dict[int, str]:
    """Module id -> its path ("encoder.layers.3.attn"); a root is named by its class.

    With several models (a GAN's two), each path starts with its root's name so the two
    cannot be confused: the script's own global name for it (`generator`, `encoder`),
    else its class name (a second root of the same class gets "_1", and so on). A model
    compiled by `torch.compile` is named as the model it wraps, and so is the wrapper.
    """
    models = _lifted(models)
    wrappers = [model for model in models if _compiled_module(model) is not None]
    models = list(dict.fromkeys(_compiled_module(model) or model for model in models))
    names: dict[int, str] = {}
    classes: dict[str, int] = {}
    bound = _bound_names() if len(models) > 1 else {}
    for model in models:
        root = type(model).__name__
        seen = classes.get(root, 0)
        classes[root] = seen + 1
        root = f"{root}_{seen}" if seen and id(model) not in names else root
        root = bound.get(id(model), root)
        for path, module in model.named_modules():
            if id(module) in names:
                continue
            if not path:
                names[id(module)] = root
            else:
                names[id(module)] = f"{root}.{path}" if len(models) > 1 else path
    for wrapper in wrappers:
        names.setdefault(id(wrapper), names[id(_compiled_module(wrapper))])
    return names


def _lifted(models: Iterable[torch.nn.Module]) -> list[torch.nn.Module]:
    """The models, each replaced by the module of the script's globals that holds it as
    a part, when one does: an actor-critic whose `act` and `evaluate` call `self.actor`
    and `self.critic` never runs its own `forward`, so the parts are the roots seen;
    named within the script's `policy`, they are `actor.0`, not `Sequential.0`. A model
    the script binds to a global name of its own stays as it is. Once each, in order."""
    models = list(models)
    holders = [module for _, module in _script_modules()]
    lifted = []
    for model in models:
        holder = model
        if all(h is not model for h in holders):  # a global of its own keeps its name
            holder = next((h for h in holders if any(m is model for m in h.modules())), model)
        if all(holder is not seen for seen in lifted):
            lifted.append(holder)
    return lifted


def _compiled_module(model: torch.nn.Module) -> torch.nn.Module | None:
    """The module a `torch.compile` wrapper (`OptimizedModule`) compiles, or None."""
    inner = getattr(model, "_orig_mod", None)
    return inner if isinstance(inner, torch.nn.Module) else None


def parameter_names(
    models: Sequence[torch.nn.Module], optimizers: Sequence[torch.optim.Optimizer]
) -> dict[int, str]:
    """Parameter id -> qualified name ("head.linear.weight"), over the models (each path
    under its root's `module_names` name when there are several), then the optimizers'
    parameters no model holds: by the script's own name for a module that holds them
    ("actor.log_std": a parameter of a module the script never calls, only its parts)
    or for the tensor itself (`logits_p = torch.zeros(K, requires_grad=True)`), else
    by place ("optimizer0.param3")."""
    models = _lifted(models)
    names = module_names(models)
    models = list(dict.fromkeys(_compiled_module(model) or model for model in models))
    found: dict[int, str] = {}
    for model in models:
        root = names[id(model)] if len(models) > 1 else ""
        for name, parameter in model.named_parameters():
            found.setdefault(id(parameter), f"{root}.{name}" if root else name)
    unowned = {
        id(parameter)
        for optimizer in optimizers
        for group in optimizer.param_groups
        for parameter in group["params"]
        if id(parameter) not in found
    }
    if unowned:
        for name, module in _script_modules():
            for path, parameter in module.named_parameters():
                if id(parameter) in unowned:
                    found.setdefault(id(parameter), f"{name}.{path}")
        for key, name in script_tensor_names().items():  # `w = torch.zeros(..., ...)`
            if key in unowned:
                found.setdefault(key, name)
    for index, optimizer in enumerate(optimizers):
        for group in optimizer.param_groups:
            for number, parameter in enumerate(group["params"]):
                found.setdefault(id(parameter), f"optimizer{index}.param{number}")
    return found


def _bound_names() -> dict[int, str]:
    """Module id -> the first global name the running script bound it to."""
    found: dict[int, str] = {}
    for name, module in _script_modules():
        found.setdefault(id(module), name)
    return found


def _script_modules() -> list[tuple[str, torch.nn.Module]]:
    """The modules the running script binds to its own global names (`actor = Actor()`),
    in the order it bound them."""
    main = sys.modules.get("__main__")
    namespace = getattr(main, "__dict__", {})
    return [
        (name, value)
        for name, value in list(namespace.items())
        if isinstance(value, torch.nn.Module) and not name.startswith("_")
    ]


def script_tensor_names() -> dict[int, str]:
    """Tensor id -> the global name the running script bound it to (`logits_p =
    torch.zeros(K, requires_grad=True)`), the first name for a tensor bound twice."""
    found: dict[int, str] = {}
    for name, tensor in _script_tensors():
        found.setdefault(id(tensor), name)
    return found


def _script_tensors() -> list[tuple[str, torch.Tensor]]:
    """The tensors the running script binds to its own global names, in that order."""
    main = sys.modules.get("__main__")
    namespace = getattr(main, "__dict__", {})
    return [
        (name, value)
        for name, value in list(namespace.items())
        if isinstance(value, torch.Tensor) and not name.startswith("_")
    ]


@dataclass(frozen=True)
class TorchCall:
    """A torch function the user's code called (`torch.logdet(w)`, `w.logdet()`,
    `F.linear(x, w)`), whose aten ops are running now.

    Attributes:
        name: the function's name ("logdet", "linear", "__matmul__").
        tensors: its tensor arguments, in order.
    """

    name: str
    tensors: tuple[torch.Tensor, ...]


class _Calls(TorchFunctionMode):
    """Notes the torch function being run. Torch runs a mode's handler with the mode
    off, so the calls a function makes inside itself are not seen: the one noted is the
    outermost, the one the user's code (or a library module's `forward`) wrote."""

    def __init__(self) -> None:
        super().__init__()
        self.current: TorchCall | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        outer = self.current
        tensors = tuple(t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor))
        self.current = TorchCall(getattr(func, "__name__", ""), tensors)
        try:
            return func(*args, **kwargs)
        finally:
            self.current = outer


class ModuleScope:
    """The stack of modules whose `forward` is running (innermost last).

    Args:
        names: module id -> path (`module_names`); a module outside the watched
            models is named by its class.
    """

    def __init__(self, names: dict[int, str]) -> None:
        self._names = names
        self._stack: list[str] = []
        self._calls: _Calls | None = None

    @property
    def current(self) -> str | None:
        """The innermost running module's path, or None outside every module."""
        return self._stack[-1] if self._stack else None

    @property
    def call(self) -> TorchCall | None:
        """The torch function the user's code is running now, or None (none, or the
        scope is not `hooked`)."""
        return self._calls.current if self._calls is not None else None

    @contextlib.contextmanager
    def hooked(self) -> Iterator[ModuleScope]:
        """Follow every module's forward, and every torch function called, while the
        block runs (global hooks and a function mode, removed after)."""

        def enter(module, args):
            self._stack.append(self._names.get(id(module), type(module).__name__))

        def leave(module, args, output):
            if self._stack:
                self._stack.pop()

        handles = [
            register_module_forward_pre_hook(enter),
            register_module_forward_hook(leave, always_call=True),
        ]
        self._calls = _Calls()
        try:
            with self._calls:
                yield self
        finally:
            for handle in handles:
                handle.remove()
            self._stack.clear()
            self._calls = None
