"""Guards that keep an op's argument inside its domain, shared by forward and backward rules."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from gradient_doctor.core.findings import Edit, Fix, SourceLine
from gradient_doctor.core.knowledge.source.calls import find_call
from gradient_doctor.core.knowledge.source.operands import risky_operand
from gradient_doctor.core.knowledge.source.spelling import fill


@dataclass(frozen=True)
class Guard:
    """How to keep one op's risky argument where the op and its gradient are finite.

    Attributes:
        template: a `spelling.fill` template for the guarded argument.
        tf_line: a generic line with the op's call, for user lines that do not parse.
        torch_line: the same line in PyTorch ("" when it reads as `tf_line`).
    """

    template: str
    tf_line: str
    torch_line: str = ""

    def fallback(self, framework: str) -> str:
        """The generic line with the op's call in `framework` ("tf" or "torch")."""
        return self.torch_line or self.tf_line if framework == "torch" else self.tf_line


_UNIT_INTERVAL = "{clip}({arg}, -1.0 + 1e-7, 1.0 - 1e-7)"
_LOWER_7 = "{maximum}({arg}, 1e-7)"
_ABOVE_MINUS_ONE = "{maximum}({arg}, -1.0 + 1e-7)"
_LOWER_12 = "{maximum}({arg}, 1e-12)"
GUARDS = {
    "Log": Guard(_LOWER_7, "y = tf.math.log(x)", "y = torch.log(x)"),
    "Log1p": Guard(_ABOVE_MINUS_ONE, "y = tf.math.log1p(x)", "y = torch.log1p(x)"),
    "Xlogy": Guard(_LOWER_7, "z = tf.math.xlogy(x, y)", "z = torch.xlogy(x, y)"),
    "Xlog1py": Guard(
        _ABOVE_MINUS_ONE, "z = tf.math.xlog1py(x, y)", "z = torch.special.xlog1py(x, y)"
    ),
    "Sqrt": Guard(_LOWER_12, "y = tf.sqrt(x)", "y = torch.sqrt(x)"),
    "Rsqrt": Guard(_LOWER_12, "y = tf.math.rsqrt(x)", "y = torch.rsqrt(x)"),
    "Pow": Guard(_LOWER_12, "y = x ** p"),
    "Acos": Guard(_UNIT_INTERVAL, "angle = tf.acos(x)", "angle = torch.acos(x)"),
    "Asin": Guard(_UNIT_INTERVAL, "angle = tf.asin(x)", "angle = torch.asin(x)"),
    "Atanh": Guard(_UNIT_INTERVAL, "y = tf.atanh(x)", "y = torch.atanh(x)"),
    "Acosh": Guard("{maximum}({arg}, 1.0 + 1e-7)", "y = tf.acosh(x)", "y = torch.acosh(x)"),
    "Lgamma": Guard(_LOWER_7, "y = tf.math.lgamma(x)", "y = torch.lgamma(x)"),
    "Digamma": Guard(_LOWER_7, "y = tf.math.digamma(x)", "y = torch.digamma(x)"),
}


def guard_fix(
    family: str,
    title: str,
    code: str,
    op: str,
    template: str | None = None,
    focus: tuple[int, int] | None = None,
    at: SourceLine | None = None,
    also: Sequence[SourceLine] = (),
    framework: str = "tf",
) -> Fix:
    """A fix that wraps the op's risky operand on the user's line in its guard.

    Args:
        family: str, the fix family id.
        title: str, the fix's one-line title.
        code: str, the user's line ("" when unknown).
        op: str, the op type whose operand is guarded; a key of `GUARDS`.
        template: str, a template to use instead of the op's own guard.
        focus: where on the user's line the op was made (`SourceLine.span`).
        at: the user's line itself (to tell which of `also` stand on it).
        also: other calls of the op to guard in the same patch, each a user's line
            with the call's span: those on `at`'s line join its rewrite, the others
            become the fix's `edits`, one per line (stripped, as `rewrite` is; the
            fix's placement indents them), so the patch guards every one at once.
        framework: the framework the user trains with, which spells a guard of an
            operator (`x ** p` has no call to take the namespace from).

    Returns:
        The fix, rewriting the user's line, or the op's generic line when the user's
        line has no call to the op.
    """
    guard = GUARDS[op]
    text = template or guard.template
    here = (at.file, at.line) if at is not None else None
    same_line = [call.span for call in also if (call.file, call.line) == here]
    guarded = guard_calls(code, op, text, (focus, *same_line), framework) if code else None
    if guarded is None:
        fallback = guard.fallback(framework)
        operand = risky_operand(fallback, op)
        if operand is None:
            return Fix(family, title, fallback)
        return Fix(
            family,
            title,
            operand.replaced(fallback, fill(text, operand.call, operand.text, framework)),
        )
    others = [call for call in also if (call.file, call.line) != here]
    edits = _other_lines(op, text, others, framework)
    shown = "\n".join((guarded, *(edit.new_lines[0] for edit in edits)))
    return Fix(family, title, shown, rewrite=(guarded,), edits=edits)


def _other_lines(
    op: str, template: str, calls: Sequence[SourceLine], framework: str
) -> tuple[Edit, ...]:
    """One unplaced edit per line of `calls`, guarding each of its calls."""
    by_line: dict[tuple[str, int], list[SourceLine]] = {}
    for call in calls:
        by_line.setdefault((call.file, call.line), []).append(call)
    edits = []
    for (file, line), on_line in by_line.items():
        code = on_line[0].code.strip()
        guarded = guard_calls(code, op, template, [call.span for call in on_line], framework)
        if guarded is not None and guarded != code:
            edits.append(Edit(file, line, line, (guarded,), (code,)))
    return tuple(edits)


def guard_calls(
    code: str,
    op: str,
    template: str,
    spans: Sequence[tuple[int, int] | None],
    framework: str = "tf",
) -> str | None:
    """`code` with the operand of each call of `op` at `spans` wrapped in `template`.

    The calls are rewritten right to left, so that each one's span still points at it;
    one whose span overlaps a call already rewritten (a log of a log) is left alone.

    Args:
        code: the user's line.
        op: the op type.
        template: a `spelling.fill` template for the guarded operand.
        spans: where each call stands on the line; the first is the call that must be
            guarded (None: the line's first call of the op), the others are guarded too
            when each has its span.
        framework: the user's framework (spells a guard of an operator).

    Returns:
        The rewritten line, or None when the first call is not found on it.
    """
    first, *others = spans
    chosen = [first, *(span for span in others if span is not None and first is not None)]
    done: list[tuple[int, int]] = []
    for span in sorted(set(chosen), key=lambda s: -1 if s is None else s[0], reverse=True):
        if span is not None and any(span[0] < end and start < span[1] for start, end in done):
            continue
        operand = risky_operand(code, op, span)
        if operand is None:
            if span == first:
                return None
            continue
        guarded = fill(template, operand.call, operand.text, framework)
        code = operand.replaced(code, tightened(guarded) or guarded)
        if span is not None:
            done.append(span)
    return code


# Calls whose result is already kept off an op's edge (a clamp or a softplus).
_CLAMPS = frozenset({"maximum", "clip_by_value", "clip", "clamp", "clamp_min", "softplus"})


def already_guarded(code: str, op: str, span: tuple[int, int] | None) -> bool:
    """Whether the operand of the call of `op` at `span` is kept off its edge as written:
    a clamp of it (`tf.maximum(p, 1e-7)`) or a positive constant added (`p + 1e-7`)."""
    operand = risky_operand(code, op, span)
    if operand is None:
        return False
    try:
        tree = ast.parse(operand.text.strip(), mode="eval").body
    except SyntaxError:
        return False
    if isinstance(tree, ast.Call):
        func = tree.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name in _CLAMPS
    if isinstance(tree, ast.BinOp) and isinstance(tree.op, ast.Add):
        return any(
            isinstance(side, ast.Constant)
            and isinstance(side.value, int | float)
            and side.value > 0
            for side in (tree.left, tree.right)
        )
    return False


# The clamps whose bounds a guard can tighten in place, by name: the keywords of their
# (lower, upper) bounds (`torch.clamp(x, min=, max=)`, `tf.clip_by_value(t,
# clip_value_min=, clip_value_max=)`, `np.clip(a, a_min=, a_max=)`); a one-sided clamp
# has only a lower bound.
_BOUNDS = {
    "clamp": ("min", "max"),
    "clip": ("min", "max"),
    "clip_by_value": ("clip_value_min", "clip_value_max"),
    "clamp_min": ("min",),
    "maximum": ("y",),
}


def tightened(guarded: str) -> str | None:
    """A guard around a clamp of the user's written as that clamp with tighter bounds.

    `torch.clamp(torch.clamp(cos, -1.0, 1.0), -1.0 + 1e-7, 1.0 - 1e-7)` becomes
    `torch.clamp(cos, -1.0 + 1e-7, 1.0 - 1e-7)`: each of the user's bounds that lets the
    value reach the guard's is replaced by the guard's, one already inside it is kept.

    Args:
        guarded: str, the guard's call, its first argument the user's operand.

    Returns:
        The user's clamp with the bounds tightened, or None when the operand is no clamp
        with as many bounds, or one of its bounds is not a number as written.
    """
    outer = find_call(guarded, tuple(_BOUNDS))
    inner = find_call(outer.args[0], tuple(_BOUNDS)) if outer and outer.args else None
    if inner is None or outer is None or inner.start != 0 or inner.end != len(outer.args[0]):
        return None
    keywords = _BOUNDS[inner.name]
    wanted = outer.args[1:]
    if len(keywords) != len(wanted) or len(_BOUNDS[outer.name]) != len(wanted):
        return None
    args, kwargs = list(inner.args), dict(inner.kwargs)
    for index, (keyword, bound) in enumerate(zip(keywords, wanted, strict=True)):
        written = inner.argument(index + 1, keyword)
        mine, theirs = _number(bound), _number(written) if written is not None else None
        if written is None or mine is None or theirs is None:
            return None
        if (theirs < mine) if index == 0 else (theirs > mine):  # a lower bound, then an upper
            if index + 1 < len(args):
                args[index + 1] = bound
            else:
                kwargs[keyword] = bound
    rewritten = dataclasses.replace(inner, kwargs=tuple(kwargs.items()))
    return rewritten.render(tuple(args))


def _number(text: str) -> float | None:
    """The value of a bound written as a number (`-1.0`, `1.0 - 1e-7`), else None."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None
    return _value(node)


def _value(node: ast.expr) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _value(node.operand)
        return None if operand is None else -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        left, right = _value(node.left), _value(node.right)
        if left is None or right is None:
            return None
        return left + right if isinstance(node.op, ast.Add) else left - right
    return None
