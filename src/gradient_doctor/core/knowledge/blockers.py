"""Ops that stop a gradient path, by family: why each has no gradient and what restores one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.remedies import discrete as discrete_remedies
from gradient_doctor.core.knowledge.remedies import paths as path_remedies
from gradient_doctor.core.knowledge.source.calls import Call

FixBuilder = Callable[[str, Call | None], tuple[Fix, ...]]

_BEFORE = "so every variable before it gets None"


def _no_fixes(code: str, call: Call | None) -> tuple[Fix, ...]:
    return ()


@dataclass(frozen=True)
class Blocker:
    """A family of ops through which no gradient flows.

    Attributes:
        name: the family's name, e.g. "index".
        ops: the op types in the family.
        why: one or two sentences saying why, with "{op}" for the op type.
        calls: the names of the calls that create the ops on a user's line.
        fixes: builds the fixes from the user's line and the call found on it.
        often_intended: the block is usually deliberate, so stopping training of the
            variables is a fix too.
    """

    name: str
    ops: frozenset[str]
    why: str
    calls: tuple[str, ...]
    fixes: FixBuilder
    often_intended: bool = False


BLOCKERS: tuple[Blocker, ...] = (
    Blocker(
        "index",
        frozenset({"ArgMax", "ArgMin", "TopKV2"}),
        "{op} picks an index: a small change of the logits does not change it, so the "
        "index has no gradient and every variable before it gets None.",
        ("argmax", "argmin", "top_k"),
        discrete_remedies.argmax_fixes,
    ),
    Blocker(
        "sampling",
        frozenset({"Multinomial", "RandomCategorical", "StatelessMultinomial"}),
        f"{{op}} draws tokens at random: sampling a token is not differentiable, {_BEFORE}.",
        ("categorical", "stateless_categorical", "multinomial"),
        discrete_remedies.sampling_fixes,
    ),
    Blocker(
        "lookup",
        frozenset({"GatherV2", "Gather", "ResourceGather", "GatherNd", "ResourceGatherNd"})
        | {"OneHot"},
        "{op} takes integer indices (an embedding lookup or one-hot of generated tokens): "
        "the indices carry no gradient, only the values looked up do, so every variable "
        "that produced the indices gets None.",
        ("embedding_lookup", "gather", "gather_nd", "one_hot"),
        discrete_remedies.lookup_fixes,
    ),
    Blocker(
        "cast",
        frozenset({"Cast"}),
        f"{{op}} converts the value to an integer or bool dtype: integers carry no gradient, "
        f"{_BEFORE}.",
        ("cast",),
        discrete_remedies.cast_fixes,
    ),
    Blocker(
        "piecewise_constant",
        frozenset({"Round", "Rint", "Floor", "Ceil", "Sign", "FloorDiv"}),
        "{op} is piecewise constant: its output jumps between flat steps, so it has no "
        "useful gradient and every variable before it gets None.",
        ("round", "rint", "floor", "ceil", "sign", "floordiv", "floor_divide"),
        discrete_remedies.rounding_fixes,
    ),
    Blocker(
        "comparison",
        frozenset({"Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual"})
        | {"LogicalAnd", "LogicalOr", "LogicalNot", "IsFinite", "IsNan", "IsInf"},
        f"{{op}} compares values and returns booleans: a comparison has no gradient, {_BEFORE}.",
        ("greater_equal", "less_equal", "greater", "less", "not_equal", "equal"),
        discrete_remedies.comparison_fixes,
    ),
    Blocker(
        "stop_gradient",
        frozenset({"StopGradient", "PreventGradient"}),
        f"{{op}} (tf.stop_gradient) blocks the gradient on purpose, {_BEFORE}; that is "
        "usually intended (a target network, a frozen encoder, the hard part of a "
        "straight-through estimator).",
        ("stop_gradient", "prevent_gradient"),
        path_remedies.remove_stop_gradient,
        often_intended=True,
    ),
    Blocker(
        "python_function",
        frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc", "NumpyFunction"}),
        "{op} runs a Python function that TensorFlow cannot look into: tf.numpy_function has "
        f"no gradient, {_BEFORE}.",
        ("numpy_function", "py_func", "py_function"),
        path_remedies.py_function_fixes,
    ),
    Blocker(
        "shape_only",
        frozenset({"ZerosLike", "OnesLike", "Shape", "ShapeN", "Size", "Rank"}),
        f"{{op}} reads only the shape of its input, not its values, {_BEFORE}.",
        (),
        _no_fixes,
    ),
)
DEFAULT = Blocker(
    "default",
    frozenset(),
    f"{{op}} has no registered gradient, {_BEFORE}.",
    (),
    path_remedies.no_gradient_fixes,
)
_BY_OP = {op: blocker for blocker in BLOCKERS for op in blocker.ops}


def blocker_for(op: str) -> Blocker:
    """The family of an op type that has no gradient; `DEFAULT` when no family claims it."""
    return _BY_OP.get(op, DEFAULT)
