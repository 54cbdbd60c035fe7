"""Rewrite a mask's -inf fill into the dtype's lowest finite value.

`scores.masked_fill(pad, float("-inf"))` before a softmax is harmless in a row that keeps
one key, but a row whose keys are all masked (an empty or all-padding sequence) is -inf
everywhere, and its softmax is 0 / 0 = NaN, in the forward pass and in the gradient. The
lowest finite value of the scores' dtype (`torch.finfo(scores.dtype).min`,
`scores.dtype.min` in TensorFlow) weighs the masked keys exactly 0 wherever a row keeps
one (exp underflows, as it did from -inf), and gives a fully masked row uniform weights
instead of NaN. The value is the dtype's own, so it stays finite under float16 too.
"""

from __future__ import annotations

import re

from gradient_doctor.core.evidence import OpCall
from gradient_doctor.core.findings import Edit, Fix
from gradient_doctor.core.knowledge.source.calls import (
    Call,
    find_call,
    find_method_call,
    replace_span,
)

TITLE = (
    "Mask with the dtype's lowest finite value instead of -inf, so that a row whose every "
    "entry is masked gets uniform weights, not 0 / 0"
)
# How a negative infinity is spelled in a user's line.
_MINUS_INF = re.compile(
    r"""float\(\s*(['"])-inf(inity)?\1\s*\)"""
    r"""|-\s*float\(\s*(['"])inf(inity)?\3\s*\)"""
    r"""|-\s*(math|np|numpy|torch)\.inf\b""",
    re.IGNORECASE,
)
# The calls that write the fill: a masked fill (its receiver is the tensor filled, whose
# dtype the fill takes) or a `where` (its kept branch is).
_MASKED_FILLS = ("masked_fill", "masked_fill_")
_FILLS = (*_MASKED_FILLS, "where")


def finite_mask(producer: OpCall | None, framework: str, dtype: str | None = None) -> Fix | None:
    """A `finite_mask` fix of the line whose mask call wrote the -inf a softmax read, or
    None when that line has no such call with a -inf spelled in it. The lowest value is
    the filled tensor's dtype's, or, when that tensor is no plain name
    (`self.pi(h).masked_fill(...)`), the dtype the replay saw (`dtype`: "float32")."""
    if producer is None or producer.source_kind != "op" or not producer.source.code:
        return None
    source = producer.source
    code = source.code.strip()
    call = find_call(code, _FILLS, source.span)
    if call is not None:
        start, end, filled = call.start, call.end, _filled_tensor(call)
    else:  # a fill of an expression's value: `self.pi(h).masked_fill(~mask, -inf)`
        method = find_method_call(code, _MASKED_FILLS, source.span)
        if method is None:
            return None
        start, end = method.start, method.end
        filled = method.receiver if re.fullmatch(r"[A-Za-z_][\w.]*", method.receiver) else None
    text = code[start:end]
    fill = _MINUS_INF.search(text)
    if fill is None or (filled is None and not dtype):
        return None
    if filled is None:
        lowest = f"torch.finfo(torch.{dtype}).min" if framework == "torch" else f"tf.{dtype}.min"
    elif framework == "torch":
        lowest = f"torch.finfo({filled}.dtype).min"
    else:
        lowest = f"{filled}.dtype.min"
    text = text[: fill.start()] + lowest + text[fill.end() :]
    new = replace_span(code, start, end, text)
    edit = Edit(source.file, source.line, source.line, (new,), (code,))
    return Fix("finite_mask", TITLE, new, edits=(edit,))


def _filled_tensor(call: Call) -> str | None:
    """The tensor the call fills, as written: a method's receiver (`scores.masked_fill`),
    or `where`'s kept branch; None when it is not a plain name."""
    if call.name in _MASKED_FILLS:
        text = call.prefix[:-1] if call.prefix.endswith(".") else ""
        if call.prefix.startswith(("torch.", "tf.")) and call.args:
            text = call.args[0]  # torch.masked_fill(scores, mask, value)
        candidates = [text]
    else:  # where(mask, scores, -inf) or where(mask, -inf, scores)
        candidates = list(call.args[1:3])
    names = [t.strip() for t in candidates if re.fullmatch(r"[A-Za-z_][\w.]*", t.strip())]
    return names[0] if names else None
