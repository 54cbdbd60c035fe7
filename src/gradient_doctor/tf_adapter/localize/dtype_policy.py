"""The dtype policy the weights were built under, and the user's line that set it.

Keras builds each layer's variables in its policy's variable dtype: under the global
policy "float16" the weights, and the optimizer's slots made after them, are float16,
while "mixed_float16" computes in float16 and keeps them in float32. The line that set
the policy is found in the user's source: the one call of `set_dtype_policy` or
`set_global_policy` whose argument is that policy's name, written as a string.
"""

from __future__ import annotations

import ast

import keras

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.knowledge.rewrites.dtype_policy import POLICY_SETTERS
from gradient_doctor.core.knowledge.source.syntax_edit import argument
from gradient_doctor.core.source_frames import source_line
from gradient_doctor.tf_adapter.hooks.creation_sites import user_calls


def global_policy(dtype: str) -> str | None:
    """The global policy's name when its variables are of `dtype` (the weights were
    built under it, unless a layer was given a policy of its own), else None."""
    policy = keras.config.dtype_policy()
    return policy.name if policy.variable_dtype == dtype else None


def policy_site(policy: str) -> SourceLine | None:
    """The user's one call that set the global policy `policy`, or None when there is
    none or several, or its argument is not written as that string."""
    calls = [
        (file, node)
        for name in sorted(POLICY_SETTERS)
        for file, node in user_calls(name)
        if _policy_argument(node) == policy
    ]
    if len(calls) != 1:
        return None
    file, node = calls[0]
    return source_line(file, node.lineno, node.end_lineno or node.lineno, None, None)


def _policy_argument(node: ast.Call) -> str | None:
    """The policy a setter call names as a string literal, or None."""
    value = argument(node, 0, "policy")
    if not isinstance(value, ast.Constant) or not isinstance(value.value, str):
        return None
    return value.value
