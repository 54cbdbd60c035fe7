"""Rewrite the log of a softmax on the user's line into the library's log_softmax.

`torch.log(F.softmax(logits, dim=1))` is -inf wherever the softmax underflowed to 0, and
its gradient 1 / p is infinite there; `F.log_softmax(logits, dim=1)` computes the same
value as `x - logsumexp(x)`, finite everywhere, with no clamp that changes it. Every
namespace that has a softmax has a log_softmax of the same name beside it, taking the
same arguments: `F.`, `torch.`, a tensor's method (`x.softmax(dim=1)`), `tf.nn.`,
`tf.math.`, `keras.ops.`, `keras.activations.`, `scipy.special.`, `jax.nn.`; so the
rewrite renames the softmax call as the user wrote it and drops the log around it.
"""

from __future__ import annotations

from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.source.calls import find_call, parses, replace_span

TITLE = "Compute log(softmax(x)) as log_softmax(x), which is exact and never -inf"
# The log ops whose input can be a softmax's output (PyTorch's log2 and log10 are "Log"
# too, but only a natural log of a softmax is a log_softmax).
OPS = frozenset({"Log"})


def log_softmax(code: str, op: str, focus: tuple[int, int] | None = None) -> Fix | None:
    """A `library_function` fix replacing `log(softmax(args))` on the line by
    `log_softmax(args)`, or None when the log's argument is not a softmax call as a whole.

    Args:
        code: str, the user's line ("" when unknown).
        op: str, the origin's op type (or, for a backward origin, its forward op's).
        focus: where on the line the log was made (`SourceLine.span`).

    Returns:
        The fix, rewriting the line, or None.
    """
    if op not in OPS or not code:
        return None
    code = code.strip()
    log = find_call(code, ("log",), focus)
    if log is None or len(log.args) != 1 or log.kwargs:
        return None
    argument = log.args[0].strip()
    softmax = find_call(argument, ("softmax",))
    if softmax is None or softmax.start != 0 or softmax.end != len(argument):
        return None
    renamed = f"{softmax.prefix}log_{argument[len(softmax.prefix) :]}"
    rewritten = replace_span(code, log.start, log.end, renamed)
    if not parses(renamed, "eval") or (parses(code) and not parses(rewritten)):
        return None
    return Fix("library_function", TITLE, rewritten, rewrite=(rewritten,))
