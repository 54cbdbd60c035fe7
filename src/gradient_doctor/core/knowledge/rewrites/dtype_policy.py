"""Rewrite the user's line that set a half-precision dtype policy to set the mixed one instead.

`keras.config.set_dtype_policy("float16")` becomes
`keras.config.set_dtype_policy("mixed_float16")` (and `set_global_policy` likewise;
"bfloat16" becomes "mixed_bfloat16"): the layers keep computing in half precision,
and their variables, with the optimizer's state made after them, are float32.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from gradient_doctor.core.findings import Edit, SourceLine
from gradient_doctor.core.knowledge.source.syntax_edit import (
    argument,
    callee,
    calls_on,
    parse,
    replace_node,
    segment,
)

# The functions that set Keras's global policy, and the mixed policy for each half one.
POLICY_SETTERS = frozenset({"set_dtype_policy", "set_global_policy"})
MIXED_POLICIES = {"float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}


def mixed_policy(source: SourceLine, lines: Sequence[str]) -> tuple[Edit, str] | None:
    """An edit of the policy call on `source` naming the mixed policy in place of the half
    one, in the same quotes, and that policy's name; None when the lines hold no such
    call (or no longer parse)."""
    tree, text = parse(lines)
    if tree is None:
        return None
    for call in calls_on(tree, source):
        if callee(call.func) not in POLICY_SETTERS:
            continue
        value = argument(call, 0, "policy")
        if not isinstance(value, ast.Constant) or value.value not in MIXED_POLICIES:
            continue
        quote = segment(text, value)[0]
        mixed = MIXED_POLICIES[value.value]
        return replace_node(text, value, f"{quote}{mixed}{quote}", source.file), mixed
    return None
