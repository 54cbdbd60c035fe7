"""The function names that create each op type in user code, for finding it on the line."""

from __future__ import annotations

# Op type -> names of the calls (any module prefix) that create it. Keras spells the
# inverse trigonometric functions "arccos" etc.; numpy and keras say "power".
CALL_NAMES: dict[str, tuple[str, ...]] = {
    "Exp": ("exp",),
    "Expm1": ("expm1",),
    "Cosh": ("cosh",),
    "Sinh": ("sinh",),
    "Pow": ("pow", "power"),
    "Log": ("log",),
    "Log1p": ("log1p",),
    "Xlogy": ("xlogy",),
    "Xlog1py": ("xlog1py",),
    "Sqrt": ("sqrt",),
    "Rsqrt": ("rsqrt",),
    "Acos": ("acos", "arccos"),
    "Asin": ("asin", "arcsin"),
    "Atanh": ("atanh", "arctanh"),
    "Acosh": ("acosh", "arccosh"),
    "Lgamma": ("lgamma", "gammaln"),
    "Digamma": ("digamma",),
    "RealDiv": ("divide", "truediv", "div"),
    "Div": ("divide", "truediv", "div"),
    "FloorDiv": ("floordiv", "floor_divide"),
    "Reciprocal": ("reciprocal",),
    "Inv": ("reciprocal",),
    "Xdivy": ("xdivy",),
    "EuclideanNorm": ("norm", "reduce_euclidean_norm"),
    "MatMul": ("matmul",),
    "Square": ("square",),
}


def call_names(op: str | None) -> tuple[str, ...]:
    """The call names for an op type, or () when none is known."""
    return CALL_NAMES.get(op, ()) if op else ()
