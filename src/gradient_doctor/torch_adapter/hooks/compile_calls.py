"""`torch.compile`, noticed while `gradient-doctor run` watches a script.

TorchDynamo traces a compiled module's forward together with every global module hook
it finds, and guards the compiled code on those hooks: the sampled steps' forward hooks
(`ModuleStats`) would be traced into the user's graph (which fails for hooks that keep
state, as the doctor's do) and, coming and going, make it recompile. So once the script
compiles anything (`torch.compile(model)`, `model.compile()`, `@torch.compile`), the
owner is told (`on_compile`), and stops hooking forwards; the compiled code then runs as
it runs unwatched. The update's check, outside the compiled code, is unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch


class CompileCalls:
    """Replaces `torch.compile` until uninstalled with one that calls `on_compile()`
    first (`Module.compile` calls it too); installing twice is installing once."""

    def __init__(self, on_compile: Callable[[], None]) -> None:
        self._on_compile = on_compile
        self._original: Callable | None = None

    def install(self) -> None:
        if self._original is not None:
            return
        original = self._original = torch.compile

        @functools.wraps(original)
        def compile(*args, **kwargs):
            self._on_compile()
            return original(*args, **kwargs)

        torch.compile = compile

    def uninstall(self) -> None:
        if self._original is not None:
            torch.compile = self._original
            self._original = None


def compiled(function_or_module: object) -> bool:
    """Whether `function_or_module` is already compiled by `torch.compile` (a module's
    `OptimizedModule` wrapper, or a compiled function)."""
    return hasattr(function_or_module, "_orig_mod") or hasattr(
        function_or_module, "_torchdynamo_orig_callable"
    )
