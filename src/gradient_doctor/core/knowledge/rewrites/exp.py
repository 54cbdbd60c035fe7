"""Rewrite a line that calls exp so that its input stays below the overflow limit."""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gradient_doctor.core.dtype_limits import DtypeLimits, dtype_limits
from gradient_doctor.core.evidence import OpCall, Reduction
from gradient_doctor.core.findings import Edit, Fix
from gradient_doctor.core.knowledge.source.calls import (
    Call,
    assigned_name,
    find_call,
    find_calls,
    find_method_call,
    grouped,
    is_identifier,
    matching_close,
    replace_span,
)
from gradient_doctor.core.knowledge.source.operands import risky_operand
from gradient_doctor.core.knowledge.source.spelling import (
    fill,
    namespace,
    reduce_keywords,
    spell,
)
from gradient_doctor.core.knowledge.wording import format_number
from gradient_doctor.core.op_trace import HUGE

_SHIFT_TITLES = {
    "axis": "Subtract the maximum before exp (a softmax's result is unchanged)",
    "masked": "Subtract the largest unmasked entry before exp (the masked softmax is unchanged)",
    "segment": "Subtract each segment's own maximum before exp (the segment softmax is unchanged)",
}
_LAST_AXIS = Reduction("axis", "Sum", axis=-1)
_MINUS_INF = 'float("-inf")'


def looks_like_softmax(code: str) -> bool:
    """True when the line normalises an exp by its sum, or says softmax."""
    lowered = code.lower()
    return "softmax" in lowered or ("exp(" in lowered and "sum(" in lowered and "/" in code)


def stable_softmax(
    code: str,
    reduction: Reduction | None = None,
    focus: tuple[int, int] | None = None,
    limits: DtypeLimits | None = None,
    minus_infinity: bool = False,
    framework: str = "tf",
    rank: int | None = None,
) -> Fix:
    """Shift the exp's input by the maximum of each group its result is normalised over.

    The shift must be constant over each group the sum normalises (one slice along
    the axis, one segment), or it changes the result: the max along the axis, or
    the segment's own max gathered back to its entries. Under a mask (`exp(s) *
    mask`, `where(keep, exp(s), 0)`) the shift is the max of the kept entries and
    the masked ones go to exp as -inf, so no masked value becomes inf * 0 = NaN
    and a fully masked row stays 0.

    Args:
        code: str, the user's line, e.g. "w = tf.exp(scores)" ("" when unknown).
        reduction: how the exp's result is summed next, as the replay saw it.
            Defaults to the sum of the same exp written on the line, else a sum
            over the last axis.
        focus: where on the line the exp was made (`SourceLine.span`).
        limits: the limits of the exp's dtype (its lowest finite value keeps a max
            of only -inf finite). Defaults to float32's.
        minus_infinity: the exp's input held -inf (a mask written before exp): a
            slice of only -inf must not be shifted by -inf into NaN.
        framework: the framework the user trains with ("tf" or "torch"): a PyTorch
            tensor's method (`scores.exp()`) is rewritten in PyTorch.
        rank: the number of dims of the exp's result, when known (a PyTorch
            segment max scatters over every dim after the first).

    Returns:
        A `stable_softmax` fix; a generic one when the line has no parsable exp call.
    """
    call = find_call(code, ("exp",), focus)
    reduction = reduction or _written_reduction(code, call)
    arg = _exp_argument(call, framework)
    if arg is None:
        return _generic_shift(call, reduction, framework)
    spelling = _Spelling(call, framework, rank)
    limits = limits or dtype_limits("float32")
    argument = _shifted(spelling, arg, reduction, limits, minus_infinity)
    # Shifted inside the call, and inside every exp of the same argument on the line
    # (a softmax written `exp(s) / sum(exp(s))` must shift both), so that no name of
    # the user's is reassigned for the lines after.
    shifted = code
    for same in reversed(
        [c for c in find_calls(code, ("exp",)) if _exp_argument(c, framework) == arg]
    ):
        shifted = replace_span(shifted, same.start, same.end, _with_argument(same, argument))
    lines = [shifted, *_alternatives(code, spelling, arg, reduction)]
    return Fix("stable_softmax", _title(reduction), "\n".join(lines), rewrite=(shifted,))


@dataclass(frozen=True)
class _Spelling:
    """How the fix spells its helpers: the user's exp call, their framework, the
    exp result's number of dims."""

    call: Call
    framework: str
    rank: int | None

    @property
    def torch(self) -> bool:
        return namespace(self.call, self.framework) == "torch"

    def helper(self, name: str) -> str:
        return spell(self.call, name, self.framework)

    def reduced(self, name: str, arg: str, axis: int) -> str:
        """`max(arg, axis=axis, keepdims=True)` in the user's namespace."""
        axis_word, keep_word = reduce_keywords(self.call, self.framework)
        return f"{self.helper(name)}({arg}, {axis_word}={axis}, {keep_word}=True)"


def _exp_argument(call: Call | None, framework: str) -> str | None:
    """The text of the exp's argument: its first argument, or, for a tensor's method
    (`scores.exp()`, `self.scores.exp()`), the tensor it is called on."""
    if call is None:
        return None
    if call.args:
        return call.args[0]
    receiver = call.prefix[:-1]
    method = framework == "torch" and namespace(call) != "torch" and "ops." not in call.prefix
    return (
        receiver if method and receiver and all(map(is_identifier, receiver.split("."))) else None
    )


def _with_argument(call: Call, argument: str) -> str:
    """The exp call computing the exp of `argument` (a method call on it, bracketed)."""
    if call.args:
        return call.with_argument(0, argument)
    return f"({argument}).{call.name}()"


def _generic_shift(call: Call | None, reduction: Reduction, framework: str) -> Fix:
    """The shift to read, for a line whose exp cannot be rewritten in place."""
    axis = reduction.axis if reduction.axis is not None else -1
    if namespace(call, framework) == "torch":
        code = (
            f"x = x - x.amax(dim={axis}, keepdim=True)  # just before exp(x)\n"
            "# or, for a softmax, let the library do it:\n"
            f"probs = torch.softmax(x, dim={axis})"
        )
    else:
        code = (
            f"x = x - tf.reduce_max(x, axis={axis}, keepdims=True)  # just before exp(x)\n"
            "# or, for a softmax, let the library do it:\n"
            f"probs = tf.nn.softmax(x, axis={axis})"
        )
    return Fix("stable_softmax", _SHIFT_TITLES["axis"], code)


def _operand(arg: str) -> str:
    """`arg` ready to be subtracted from: bracketed unless it is a name, a call, an
    attribute or an item (which bind tighter than `-`)."""
    if is_identifier(arg):
        return arg
    try:
        node = ast.parse(arg.strip(), mode="eval").body
    except SyntaxError:
        return f"({arg})"
    return arg if isinstance(node, ast.Call | ast.Attribute | ast.Subscript) else f"({arg})"


def _written_reduction(code: str, call: Call | None) -> Reduction:
    """The sum over an axis that the line itself writes around the same exp
    (`exp(s) / reduce_sum(exp(s), axis=1)`), else a sum over the last axis."""
    for total in find_calls(code, ("reduce_sum", "sum")) if call is not None else ():
        inner = find_call(total.args[0], ("exp",)) if total.args else None
        axis = total.argument(1, "axis")
        if inner is not None and inner.args[:1] == call.args[:1] and axis is not None:
            if re.fullmatch(r"-?\d+", axis.strip()):
                return Reduction("axis", "Sum", axis=int(axis))
    return _LAST_AXIS


def _title(reduction: Reduction) -> str:
    if reduction.kind != "axis":
        return _SHIFT_TITLES["segment"]
    return _SHIFT_TITLES["masked" if reduction.mask is not None else "axis"]


def _shifted(
    spelling: _Spelling, arg: str, reduction: Reduction, limits: DtypeLimits, minus_infinity: bool
) -> str:
    """The exp's new argument: `arg` less the maximum of its group, shaped like `arg`.

    Under a mask the masked entries are sent to -inf instead (exp gives 0 there),
    so that no masked value, however large, overflows into inf * 0 = NaN, and the
    kept entries are shifted by their own largest value.
    """
    call = spelling.call
    if reduction.kind != "axis":
        if spelling.torch:
            return f"{_operand(arg)} - {_torch_segment_largest(spelling, arg, reduction)}"
        return f"{_operand(arg)} - {_segment_largest(call, arg, reduction, limits, minus_infinity)}"
    axis = reduction.axis if reduction.axis is not None else -1
    if reduction.mask is None:
        row = spelling.reduced("max", arg, axis)
        return (
            f"{_operand(arg)} - {_above_lowest(spelling, row, limits) if minus_infinity else row}"
        )
    where = spelling.helper("where")
    keep = reduction.mask if reduction.mask_is_condition else f"{reduction.mask} != 0"
    kept_max = spelling.reduced("max", f"{where}({keep}, {arg}, {_MINUS_INF})", axis)
    return f"{where}({keep}, {_operand(arg)} - {kept_max}, {_MINUS_INF})"


def _torch_segment_largest(spelling: _Spelling, arg: str, reduction: Reduction) -> str:
    """Each segment's maximum gathered back to its entries, in PyTorch.

    `scatter_reduce(..., "amax")` into a tensor filled with the dtype's lowest value
    (so a segment of only -inf keeps a finite max), held constant (`detach`, the
    softmax is unchanged by it), gathered back with the user's own index. An
    `index_add_` index holds one id per entry (first dim), expanded over the other
    dims to scatter; a `scatter_add` index already has the entries' shape.
    """
    ids, x = reduction.segment_ids, _operand(arg)
    count = reduction.num_segments or f"int({ids}.max()) + 1"
    start = f"{x}.new_full(({count}, *{x}.shape[1:]), torch.finfo({x}.dtype).min)"
    per_entry = (reduction.function or "").startswith("scatter_add")
    if per_entry or spelling.rank == 1:
        index = ids
    else:
        index = f"{ids}.view(-1, *[1] * ({x}.dim() - 1)).expand_as({x})"
    largest = f'{start}.scatter_reduce(0, {index}, {x}.detach(), "amax")'
    return f"{largest}.gather(0, {ids})" if per_entry else f"{largest}[{ids}]"


def _segment_largest(
    call: Call, arg: str, reduction: Reduction, limits: DtypeLimits, minus_infinity: bool
) -> str:
    """Each segment's maximum, gathered back to the entries of that segment.

    `unsorted_segment_max` gives the dtype's lowest value, never -inf, for a segment
    of only -inf (and for an empty one, which no entry gathers); the sorted
    `segment_max` gives -inf there, so it is kept above the lowest value when the
    input held -inf.
    """
    ids, count = reduction.segment_ids, reduction.num_segments
    if namespace(call) == "keras":
        prefix = call.prefix
        options = f", num_segments={count}" if count is not None else ""
        options += ", sorted=True" if reduction.kind == "sorted_segment" else ""
        return f"{prefix}take({prefix}segment_max({arg}, {ids}{options}), {ids}, axis=0)"
    if reduction.kind == "sorted_segment":
        largest = f"tf.math.segment_max({arg}, {ids})"
        largest = (
            _above_lowest(_Spelling(call, "tf", None), largest, limits)
            if minus_infinity
            else largest
        )
    else:
        count = count if count is not None else f"tf.reduce_max({ids}) + 1"
        largest = f"tf.math.unsorted_segment_max({arg}, {ids}, {count})"
    return f"tf.gather({largest}, {ids})"


def _above_lowest(spelling: _Spelling, largest: str, limits: DtypeLimits) -> str:
    """`largest` kept at or above the dtype's lowest finite value (-inf - -inf is NaN)."""
    call = spelling.call
    family = namespace(call, spelling.framework)
    if family == "torch":
        return f"{largest}.clamp_min(torch.finfo(torch.{limits.name}).min)"
    if family == "tf":
        lowest = f"tf.{limits.name}.min"
    elif family == "np":
        lowest = f"np.finfo(np.{limits.name}).min"
    else:
        exponent = math.floor(math.log10(limits.max))
        lowest = f"-{math.floor(limits.max / 10**exponent)}e{exponent}"
    return f"{spell(call, 'maximum')}({largest}, {lowest})"


def _alternatives(code: str, spelling: _Spelling, arg: str, reduction: Reduction) -> list[str]:
    """Lines to read beside the patch: the library's softmax, or the doctor's drop-in
    (`gradient_doctor.torch.ops`, which names the axis `dim`, for a PyTorch line)."""
    torch_line = spelling.torch
    drop_ins, axis = (
        ("gradient_doctor.torch.ops", "dim") if torch_line else ("gradient_doctor.ops", "axis")
    )
    per_entry = torch_line and (reduction.function or "").startswith("scatter_add")
    if reduction.kind == "segment" and reduction.num_segments is not None and not per_entry:
        ids, count = reduction.segment_ids, reduction.num_segments
        return [
            "# or the normalised weights in one call, with gradient-doctor's drop-in:",
            f"# {drop_ins}.stable_segment_softmax({arg}, {ids}, {count})",
        ]
    if reduction.kind == "axis" and reduction.mask is not None:
        keep = reduction.mask if reduction.mask_is_condition else f"{reduction.mask} != 0"
        return [
            "# or the masked softmax in one call, with gradient-doctor's drop-in:",
            f"# {drop_ins}.stable_softmax({arg}, {axis}={reduction.axis}, mask={keep})",
        ]
    if reduction.kind == "axis" and looks_like_softmax(code):
        target = assigned_name(code) or "probs"
        return [
            "# or let the library do it:",
            f"{target} = {spelling.helper('softmax')}({arg}, {axis}={reduction.axis})",
        ]
    return []


_LOGSUMEXP_TITLE = "Compute log(sum(exp(x))) as logsumexp(x), which never overflows"


def stable_logsumexp(code: str, focus: tuple[int, int] | None = None) -> Fix | None:
    """Replace log(sum(exp(x))) on the line by logsumexp(x); None when absent.

    The sum may be a call (`tf.reduce_sum(tf.exp(s), axis=1)`) or the exp's method
    (`torch.exp(s).sum(dim=1)`). `focus` is where on the line the exp was made: the log
    around it is rewritten.
    """
    log = find_call(code, ("log",), focus)
    if log is not None and log.args:
        logsumexp, start, end = _logsumexp_of(log.args[0]), log.start, log.end
    else:  # a tensor's method: `scores.exp().sum(dim=1).log()`
        method = find_method_call(code, ("log",), focus)
        if method is None or method.args:
            return None
        logsumexp, start, end = _logsumexp_of(method.receiver), method.start, method.end
    if logsumexp is None:
        return None
    rewritten = replace_span(code, start, end, logsumexp)
    return Fix("stable_logsumexp", _LOGSUMEXP_TITLE, rewritten, rewrite=(rewritten,))


def logsumexp_over_lines(code: str, log: OpCall) -> Fix | None:
    """log(sum(exp(x))) written over two lines (`denom = tf.reduce_sum(tf.exp(s), axis=1)`
    then `tf.math.log(denom)`), both rewritten: the sum's line assigns `log_denom =
    logsumexp(s, axis=1)` and the log of `denom` becomes `log_denom`. None unless the
    sum's line assigns the whole sum to one name and the log's line takes the log of
    that name.

    Args:
        code: the exp's line (`SourceLine.code`), which the fix's `rewrite` replaces.
        log: the log the replay saw read the sum; its line is the fix's `edits`.
    """
    name = assigned_name(code)
    if name is None or log.source is None or not log.source.code:
        return None
    logsumexp = _logsumexp_of(code.split("=", 1)[1])
    if logsumexp is None:
        return None
    log_line = log.source.code.strip()
    call = find_call(log_line, ("log",), log.source.span)
    if call is None or len(call.args) != 1 or call.args[0].strip() != name:
        return None
    renamed = f"log_{name}"
    first = f"{renamed} = {logsumexp}"
    second = replace_span(log_line, call.start, call.end, renamed)
    there = Edit(log.source.file, log.source.line, log.source.line, (second,), (log_line,))
    shown = f"{first}\n{second}"
    return Fix("stable_logsumexp", _LOGSUMEXP_TITLE, shown, rewrite=(first,), edits=(there,))


def _logsumexp_of(text: str) -> str | None:
    """`text`, a sum of an exp as a whole (`tf.reduce_sum(tf.exp(s), axis=1)`,
    `torch.exp(s).sum(dim=1)`), as the logsumexp that computes its log; else None."""
    text = text.strip()
    inner = find_call(text, ("reduce_sum", "sum"))
    if inner is not None and inner.start == 0 and inner.end == len(text) and inner.args:
        exp = find_call(inner.args[0], ("exp",))
        if exp is None or exp.start != 0 or exp.end != len(inner.args[0].strip()):
            return None
        rest = [*inner.args[1:2], *(f"{key}={value}" for key, value in inner.kwargs)]
        return f"{spell(exp, 'logsumexp')}({', '.join([exp.args[0], *rest])})"
    summed = find_method_call(text, ("sum",))
    if summed is not None and summed.start == 0 and summed.end == len(text):
        exp = find_method_call(summed.receiver, ("exp",))  # `scores.exp().sum(dim=1)`
        whole = exp is not None and exp.start == 0 and exp.end == len(summed.receiver)
        if whole and not exp.args and not exp.kwargs:
            rest = [*summed.args, *(f"{key}={value}" for key, value in summed.kwargs)]
            return _torch_logsumexp(exp.receiver, rest)
    exp = find_call(text, ("exp",))
    if exp is None or exp.start != 0 or not exp.args or not text[exp.end :].startswith(".sum("):
        return None
    close = matching_close(text, exp.end + len(".sum"))
    if close != len(text) - 1:
        return None
    method = find_call("sum" + text[exp.end + len(".sum") :], ("sum",))
    if method is None:
        return None
    rest = [*method.args, *(f"{key}={value}" for key, value in method.kwargs)]
    if namespace(exp, "torch") == "torch":
        return _torch_logsumexp(exp.args[0], rest)
    return f"{spell(exp, 'logsumexp')}({', '.join([exp.args[0], *rest])})"


def _torch_logsumexp(arg: str, rest: list[str]) -> str:
    """`torch.logsumexp` of `arg` over the sum's own dims; a sum over every element
    (`.sum()`, no dim: `torch.logsumexp` needs one) over the flattened tensor."""
    if not rest:
        return f"torch.logsumexp({grouped(arg)}.flatten(), dim=0)"
    return f"torch.logsumexp({', '.join([arg, *rest])})"


_ONE = r"1(?:\.0*)?"


def library_form(code: str, focus: tuple[int, int] | None = None) -> Fix | None:
    """Replace a hand-written sigmoid or softplus on the line by the library's own.

    `exp(a) / (1 + exp(a))` and `1 / (1 + exp(-a))` are `sigmoid(a)`;
    `log(1 + exp(a))` and `log1p(exp(a))` are `softplus(a)`. The library versions
    never overflow (sigmoid saturates at 1, softplus(a) tends to a).

    `focus` is where on the line the exp was made (`SourceLine.span`).

    Returns:
        A `library_function` fix, or None when the line has neither pattern.
    """
    call = find_call(code, ("exp",), focus)
    if call is None or len(call.args) != 1:
        return None
    arg, exp = call.args[0].strip(), re.escape(call.text)
    patterns = [  # (regex around the exp call, the argument of the library function)
        (rf"{exp}\s*/\s*\(\s*{_ONE}\s*\+\s*{exp}\s*\)", arg, "sigmoid"),
        (rf"{_ONE}\s*/\s*\(\s*{_ONE}\s*\+\s*{exp}\s*\)", _negated(arg), "sigmoid"),
        (rf"(?<![\w.])(?:[A-Za-z_]\w*\.)*log\(\s*{_ONE}\s*\+\s*{exp}\s*\)", arg, "softplus"),
        (rf"(?<![\w.])(?:[A-Za-z_]\w*\.)*log1p\(\s*{exp}\s*\)", arg, "softplus"),
    ]
    numpy = call.prefix in ("np.", "numpy.")
    for pattern, argument, helper in patterns:
        match = re.search(pattern, code)
        if match is None or argument is None:
            continue
        if helper == "softplus" and numpy:  # numpy has no softplus; logaddexp is one
            replacement = f"np.logaddexp(0.0, {argument})"
        else:
            replacement = f"{spell(call, helper)}({argument})"
        rewritten = replace_span(code, match.start(), match.end(), replacement)
        return Fix(
            "library_function",
            f"Use the library's {helper}, which computes the same without overflowing",
            rewritten,
            rewrite=(rewritten,),
        )
    return None


def _negated(arg: str) -> str | None:
    """`a` for an argument written `-a` (or `-(a)`), else None."""
    if not arg.startswith("-"):
        return None
    inner = arg[1:].strip()
    if inner.startswith("(") and matching_close(inner, 0) == len(inner) - 1:
        return inner[1:-1].strip()
    return inner  # an argument of its own: no brackets needed


def clip_exp_input(
    code: str,
    op: str,
    limits: DtypeLimits,
    focus: tuple[int, int] | None = None,
    framework: str = "tf",
    bound: float | None = None,
) -> Fix | None:
    """Keep the input of exp, expm1, cosh or sinh below the overflow limit.

    Not offered for a softmax line (the shift is exact there) or a line without such
    a call (a clip placed blindly elsewhere would hide the cause).

    Args:
        code: str, the user's line.
        op: str, the op type: "Exp", "Expm1", "Cosh" or "Sinh".
        limits: the limits of the op's dtype.
        focus: where on the line the op was made (`SourceLine.span`).
        framework: the framework the user trains with (spells a tensor method's clip).
        bound: the largest input kept; None: 90% of the dtype's overflow limit.
    """
    operand = None if looks_like_softmax(code) else risky_operand(code, op, focus)
    if operand is None:
        return None
    if bound is None:
        bound = math.floor(0.9 * limits.exp_limit)
    bound = format_number(float(bound))
    if op in ("Exp", "Expm1"):
        template = f"{{minimum}}({{arg}}, {bound}.0)"
    else:
        template = f"{{clip}}({{arg}}, -{bound}.0, {bound}.0)"
    rewritten = operand.replaced(code, fill(template, operand.call, operand.text, framework))
    return Fix(
        "clip_input_domain",
        f"Keep the input of {op} below {bound} (its gradient is 0 beyond)",
        rewritten,
        rewrite=(rewritten,),
    )


# The largest input of an exp that keeps its output within any sane range (`HUGE`).
SANE_EXP_INPUT = math.floor(math.log(HUGE))
_EXP_LIKE = frozenset({"Exp", "Expm1"})


def clip_blown_up_exps(calls: Sequence[OpCall], framework: str = "tf") -> Fix | None:
    """For a forward blow-up an exp began (`Evidence.forward_blowup`: a log-variance's
    `exp(log_var)` in the tens), each of those exp calls of the user's with its input
    kept below `SANE_EXP_INPUT` (its output then below 1e6), one edit per line; None
    when the blow-up began elsewhere, or a line cannot be rewritten."""
    if not calls or calls[0].op not in _EXP_LIKE:
        return None
    edits, first = [], None
    for call in calls:
        source = call.source
        code = source.code.strip() if source.code else ""
        if call.source_kind != "op" or not code or source.end_line is not None:
            return None
        dtype = call.inputs[0].dtype if call.inputs else "float32"
        fix = clip_exp_input(
            code, call.op, dtype_limits(dtype), source.span, framework, bound=SANE_EXP_INPUT
        )
        if fix is None or not fix.rewrite or fix.rewrite[0] == code:
            return None
        edits.append(Edit(source.file, source.line, source.line, fix.rewrite, (code,)))
        first = first or fix
    lines = ", ".join(f"{call.source.file}:{call.source.line}" for call in calls)
    return replace(
        first,
        title=f"Keep the input of exp below {SANE_EXP_INPUT} at {lines} (its output below "
        f"{format_number(math.exp(SANE_EXP_INPUT))}; its gradient is 0 beyond)",
        code="\n".join(edit.new_lines[0] for edit in edits),
        rewrite=(),
        edits=tuple(edits),
    )
