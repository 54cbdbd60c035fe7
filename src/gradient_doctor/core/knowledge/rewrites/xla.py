"""Rewrite the user's line that compiles the step with XLA so that it compiles it without.

`model.compile(optimizer="sgd", loss="mse", jit_compile=True)` becomes
`model.compile(optimizer="sgd", loss="mse", jit_compile=False)`, and
`@tf.function(jit_compile=True)` becomes `@tf.function(jit_compile=False)`. A Keras
`compile(...)` call that does not say (its "auto" turns XLA on where a GPU is) gets
`jit_compile=False` added.
"""

from __future__ import annotations

from collections.abc import Sequence

from gradient_doctor.core.findings import Edit, SourceLine
from gradient_doctor.core.knowledge.source.syntax_edit import (
    argument,
    callee,
    calls_on,
    parse,
    set_keyword,
)


def compile_without_xla(source: SourceLine, lines: Sequence[str]) -> Edit | None:
    """An edit passing `jit_compile=False` to the call on `source` that compiled the
    step: the one with a `jit_compile` argument, else a `compile(...)` call; None when
    the lines hold neither (or no longer parse)."""
    tree, text = parse(lines)
    if tree is None:
        return None
    calls = calls_on(tree, source)
    chosen = next((c for c in calls if argument(c, None, "jit_compile") is not None), None)
    if chosen is None:
        chosen = next((c for c in calls if callee(c.func) == "compile"), None)
    if chosen is None:
        return None
    return set_keyword(text, chosen, "jit_compile", "False", source.file)
