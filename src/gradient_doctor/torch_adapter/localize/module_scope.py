"""Which module's `forward` is running, by its path in the model, while a step is replayed."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator, Sequence

import torch
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)


def module_names(models: Iterable[torch.nn.Module]) -> dict[int, str]:
    """Module id -> its path ("encoder.layers.3.attn"); a root is named by its class.

    With several models (a GAN's two), each path starts with its root's class name so
    the two cannot be confused (a second root of the same class gets "_1", and so on).
    """
    models = list(models)
    names: dict[int, str] = {}
    classes: dict[str, int] = {}
    for model in models:
        root = type(model).__name__
        seen = classes.get(root, 0)
        classes[root] = seen + 1
        root = f"{root}_{seen}" if seen and id(model) not in names else root
        for path, module in model.named_modules():
            if id(module) in names:
                continue
            if not path:
                names[id(module)] = root
            else:
                names[id(module)] = f"{root}.{path}" if len(models) > 1 else path
    return names


def parameter_names(
    models: Sequence[torch.nn.Module], optimizers: Sequence[torch.optim.Optimizer]
) -> dict[int, str]:
    """Parameter id -> qualified name ("head.linear.weight"), over the models (each path
    under its root's `module_names` name when there are several), then the optimizers'
    parameters no model holds: by the script's own name for a module that holds them
    ("actor.log_std": a parameter of a module the script never calls, only its parts),
    else by place ("optimizer0.param3")."""
    names = module_names(models)
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
    for index, optimizer in enumerate(optimizers):
        for group in optimizer.param_groups:
            for number, parameter in enumerate(group["params"]):
                found.setdefault(id(parameter), f"optimizer{index}.param{number}")
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


class ModuleScope:
    """The stack of modules whose `forward` is running (innermost last).

    Args:
        names: module id -> path (`module_names`); a module outside the watched
            models is named by its class.
    """

    def __init__(self, names: dict[int, str]) -> None:
        self._names = names
        self._stack: list[str] = []

    @property
    def current(self) -> str | None:
        """The innermost running module's path, or None outside every module."""
        return self._stack[-1] if self._stack else None

    @contextlib.contextmanager
    def hooked(self) -> Iterator[ModuleScope]:
        """Follow every module's forward while the block runs (global hooks, removed after)."""

        def enter(module, args):
            self._stack.append(self._names.get(id(module), type(module).__name__))

        def leave(module, args, output):
            if self._stack:
                self._stack.pop()

        handles = [
            register_module_forward_pre_hook(enter),
            register_module_forward_hook(leave, always_call=True),
        ]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()
            self._stack.clear()
