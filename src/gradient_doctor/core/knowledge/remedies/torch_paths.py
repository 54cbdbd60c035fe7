"""Fixes for a broken gradient path spelled in PyTorch: Gumbel-softmax, straight-through,
REINFORCE, soft embeddings, `.detach()`, `torch.no_grad()`, Python round trips, unused
parameters.

The families are the TensorFlow fixes' (`remedies/discrete.py`, `remedies/paths.py`), so
reports and tests name them alike; the code is what a PyTorch user writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gradient_doctor.core.findings import Fix, SourceLine
from gradient_doctor.core.knowledge.layer_groups import LayerGroup, variable_names
from gradient_doctor.core.knowledge.rewrites.numpy_calls import TORCH_REENTRY_CALLS
from gradient_doctor.core.knowledge.rewrites.numpy_calls import stay_in_torch as torch_rewrite
from gradient_doctor.core.knowledge.source.calls import (
    Call,
    assigned_name,
    find_call,
    find_method_call,
    is_identifier,
    replace_span,
)
from gradient_doctor.core.knowledge.wording import line_ref

# The namespaces a call of PyTorch's own is written under (a method call has the
# tensor's name as its prefix instead: `logits.argmax(dim=-1)`).
_MODULE_PREFIXES = ("torch.", "F.", "nn.functional.", "torch.nn.functional.")


def _subject(call: Call | None, keyword: str) -> str | None:
    """The tensor a call works on: its first argument (`torch.argmax(logits)`), or the
    object of a method call (`logits.argmax()`)."""
    if call is None:
        return None
    if call.prefix and not call.prefix.startswith(_MODULE_PREFIXES):
        return call.prefix.removesuffix(".")
    return call.argument(0, keyword)


def _dim(call: Call | None) -> str:
    """The dimension a call chooses along, as written (-1 when not given)."""
    if call is None:
        return "-1"
    if call.prefix and not call.prefix.startswith(_MODULE_PREFIXES):
        written = call.argument(0, "dim")
    else:
        written = call.argument(1, "dim")
    return written if written is not None and call.name != "topk" else "-1"


def choice_fixes(code: str, call: Call | None) -> tuple[Fix, ...]:
    """Fixes for an index picked by argmax and used as a number, not looked up (a
    router's expert, a gate's branch made a mask): the softmax's weights instead, the
    hard pick forward with the softmax's gradient backward, or REINFORCE."""
    scores = _subject(call, "input")
    prelude: list[str] = []
    if scores is None:
        scores, prelude = "logits", ["# logits: the scores the index is picked from"]
    elif not is_identifier(scores):
        scores, prelude = "logits", [f"logits = {scores}"]
    dim = _dim(call)
    picked = assigned_name(code) or "index"
    weights = f"{picked}_weights"
    use = (
        f"# where `{picked}` picks one option, weight each option by its column of "
        f"`{weights}` instead (a mask made of `{picked}` == k becomes {weights}[..., k])"
    )
    return (
        Fix(
            "soft_choice",
            "Weight the options by the softmax of the scores instead of picking one by its index",
            "\n".join([*prelude, f"{weights} = torch.softmax({scores}, dim={dim})", use]),
        ),
        Fix(
            "straight_through",
            "Straight-through estimator: the one-hot pick forward, the softmax's gradient backward",
            "\n".join(
                [
                    *prelude,
                    f"soft = torch.softmax({scores}, dim={dim})",
                    f"hard = F.one_hot(soft.argmax(dim={dim}), soft.shape[{dim}]).to(soft.dtype)",
                    f"{weights} = soft + (hard - soft).detach()  # exactly one-hot forward",
                    use,
                ]
            ),
        ),
        Fix(
            "reinforce",
            "Policy gradient (REINFORCE): keep the discrete pick and weight its "
            "log-probability by the reward it earns",
            "\n".join(
                [
                    *prelude,
                    f"dist = torch.distributions.Categorical(logits={scores})",
                    f"{picked} = dist.sample()  # discrete picks, as before",
                    f"reward = score.detach()  # per example: how well `{picked}` did (your "
                    "task's)",
                    f"loss = loss - (dist.log_prob({picked}) * (reward - reward.mean())).mean()",
                ]
            ),
        ),
    )


def token_fixes(code: str, call: Call | None) -> tuple[Fix, ...]:
    """Fixes for tokens chosen by argmax, topk or sampling, or looked up by their ids."""
    logits = _subject(call, "input")
    prelude: list[str] = []
    if logits is None or call is None or call.name in ("embedding", "one_hot", "gather"):
        logits, prelude = "logits", ["# logits: the scores the tokens are chosen from"]
    elif not is_identifier(logits):
        logits, prelude = "logits", [f"logits = {logits}"]
    dim = _dim(call)
    tokens = assigned_name(code) or "tokens"
    embed = [
        "# a one-hot row times the table is embedding(id): what reads real tokens takes",
        "# F.one_hot(real_ids, vocab_size).float() (a GAN's discriminator, for real sentences)",
        "embedded = probs @ embedding.weight  # instead of embedding(" + tokens + ")",
    ]
    return (
        Fix(
            "soft_embedding",
            "Feed soft one-hot probabilities through the embedding table instead of token ids",
            "\n".join([*prelude, f"probs = torch.softmax({logits}, dim={dim})  # not ids", *embed]),
        ),
        Fix(
            "gumbel_softmax",
            "Sample with the Gumbel-softmax: one-hot tokens forward, a differentiable "
            "sample's gradient backward",
            "\n".join(
                [
                    *prelude,
                    f"probs = F.gumbel_softmax({logits}, tau=0.5, hard=True, dim={dim})"
                    "  # anneal tau toward 0.1",
                    *embed,
                ]
            ),
        ),
        Fix(
            "reinforce",
            "Policy gradient (REINFORCE): keep discrete tokens and weight their "
            "log-probabilities by the reward the tokens earn (a GAN's discriminator's "
            "verdict, a task's score)",
            "\n".join(
                [
                    *prelude,
                    f"dist = torch.distributions.Categorical(logits={logits})",
                    f"{tokens} = dist.sample()  # discrete tokens, as before",
                    f"reward = discriminator({tokens}).detach().squeeze(-1)"
                    "  # or whatever scores these tokens",
                    "log_prob = dist.log_prob(" + tokens + ").flatten(1).sum(dim=1)",
                    "g_loss = -(log_prob * (reward - reward.mean())).mean()",
                ]
            ),
        ),
        Fix(
            "straight_through",
            "Straight-through estimator: exact one-hot tokens forward, the softmax's "
            "gradient backward",
            "\n".join(
                [
                    *prelude,
                    f"y_soft = torch.softmax({logits}, dim={dim})",
                    f"y_hard = F.one_hot(y_soft.argmax(dim={dim}), y_soft.shape[{dim}])"
                    ".to(y_soft.dtype)",
                    "probs = y_soft + (y_hard - y_soft).detach()"
                    "  # one-hot forward, softmax gradient backward",
                    *embed,
                ]
            ),
        ),
    )


def cast_fixes(code: str, call: Call | None) -> tuple[Fix, ...]:
    """Fixes for a cast to an integer or bool dtype: stay float, or round straight-through."""
    value = _value(call)
    return (
        Fix(
            "remove_cast",
            "Keep the value float: drop the cast to an integer dtype",
            _line_without(code, call, value, "y = x  # instead of y = x.long()"),
        ),
        _straight_through(value, f"torch.round({value})", "integer values"),
    )


def rounding_fixes(code: str, call: Call | None) -> tuple[Fix, ...]:
    """Fixes for round, floor, ceil and sign: round straight-through, or stay continuous."""
    value = _value(call)
    hard = call.text if call is not None else f"torch.round({value})"
    return (
        _straight_through(value, hard, "the rounded value"),
        Fix(
            "remove_cast",
            "Keep the value continuous: drop the rounding from the path to the loss",
            _line_without(code, call, value, "y = x  # instead of y = torch.round(x)"),
        ),
    )


def comparison_fixes(code: str, call: Call | None) -> tuple[Fix, ...]:
    """A smooth step (a sigmoid) in the backward pass of a hard comparison."""
    return (
        Fix(
            "straight_through",
            "Straight-through comparison: the hard 0/1 forward, a sigmoid's gradient backward",
            "soft = torch.sigmoid((a - b) / 0.1)  # a smooth a > b; a smaller 0.1 is sharper\n"
            "step = soft + ((a > b).to(soft.dtype) - soft).detach()"
            "  # 0/1 forward, the sigmoid's gradient backward",
        ),
    )


def detach_fixes(code: str, call: Call | None) -> tuple[Fix, ...]:
    """Drop the `.detach()` on the user's line: of a name (`h.detach()`), or of any
    expression (`self.mlp(x).detach()`, read as a method call on it)."""
    title = "Remove the .detach() if these parameters must train"
    if call is not None:
        start, end, value = call.start, call.end, _subject(call, "input") or "x"
    else:
        method = find_method_call(code, ("detach",)) if code else None
        if method is None or method.args or method.kwargs:
            return (Fix("remove_stop_gradient", title, "y = x  # instead of y = x.detach()"),)
        start, end, value = method.start, method.end, method.receiver
    line = replace_span(code, start, end, value)
    was = code[start:end]
    return (Fix("remove_stop_gradient", title, f"{line}  # was: {was}", rewrite=(line,)),)


def no_gradient_fixes(code: str, call: Call | None) -> tuple[Fix, ...]:
    """For an op with no gradient: give it one with `torch.autograd.Function`."""
    body = code or "y = op(x)"
    return (
        Fix(
            "custom_gradient",
            "Give the step a gradient with torch.autograd.Function",
            "\n".join(
                [
                    "class WithGradient(torch.autograd.Function):",
                    "    @staticmethod",
                    "    def forward(ctx, x):",
                    f"        return op(x)  # the op on your line: {body}",
                    "",
                    "    @staticmethod",
                    "    def backward(ctx, upstream):",
                    "        return upstream  # its derivative times upstream; identity = "
                    "straight-through",
                    "",
                    "y = WithGradient.apply(x)",
                ]
            ),
        ),
    )


# The fixes of each blocker family (`knowledge/blockers.py`) in PyTorch.
BLOCKER_FIXES: dict[str, Callable[[str, Call | None], tuple[Fix, ...]]] = {
    "index": token_fixes,
    "sampling": token_fixes,
    "lookup": token_fixes,
    "cast": cast_fixes,
    "piecewise_constant": rounding_fixes,
    "comparison": comparison_fixes,
    "stop_gradient": detach_fixes,
    "python_function": no_gradient_fixes,
    "shape_only": lambda code, call: (),
    "default": no_gradient_fixes,
}
# The calls that make each family's ops on a PyTorch line, where they differ from
# TensorFlow's.
BLOCKER_CALLS: dict[str, tuple[str, ...]] = {
    "index": ("argmax", "argmin", "topk", "max"),
    "sampling": ("multinomial", "sample"),
    "lookup": ("embedding", "one_hot", "gather", "index_select"),
    "cast": ("long", "int", "bool", "to", "type", "short", "byte"),
    "piecewise_constant": ("round", "floor", "ceil", "sign", "trunc", "floor_divide"),
    "stop_gradient": ("detach",),
}


def enable_grad(source: SourceLine | None) -> Fix:
    """Run the user's line with gradients on: out of its `torch.no_grad()` block (a
    `compute_inside_graph` fix, PyTorch's spelling of `compute_inside_tape`)."""
    code = source.code.strip() if source is not None else "h = model.encoder(x)"
    return Fix(
        "compute_inside_graph",
        f"Compute `{code}` with gradients on: outside `torch.no_grad()`/`torch.inference_mode()`",
        "\n".join(
            [
                f"{code}  # moved out of the `with torch.no_grad():` block: autograd records",
                "# only what runs with gradients on (keep no_grad for evaluation and targets)",
            ]
        ),
    )


def stay_in_torch(left: SourceLine | None, back: SourceLine | None) -> Fix:
    """Keep a value that left for Python or NumPy (`.item()`, `.tolist()`, `.numpy()`) a
    tensor: the user's lines rewritten where they hold a NumPy round trip, else an example.

    Args:
        left: the user's line whose result left PyTorch, if known.
        back: the user's line where it came back as a new tensor, if known.

    Returns:
        A `stay_in_framework` fix (PyTorch's spelling of `stay_in_tensorflow`).
    """
    sources = [s for s in (left, back) if s is not None]
    # One line, once (the value may leave and come back on the same line).
    sources = [s for n, s in enumerate(sources) if (s.file, s.line) not in _places(sources[:n])]
    lines: list[str] = []
    for source in sources:
        rewritten = torch_rewrite(source.code.strip())
        if rewritten is None:
            continue
        lines += [f"# {line_ref(source)} was: {source.code.strip()}", rewritten]
        if "np." in rewritten or "numpy." in rewritten:
            lines.append("# and write the remaining np.* call in torch ops")
    if lines:
        lines.append("# any function of yours on the way (a NumPy loss) must use torch ops too")
        title = "Stay in PyTorch: tensor ops instead of NumPy, so autograd can follow the value"
    else:
        made = reentry_call(back)
        span = " and ".join(line_ref(s) for s in sources) or "the model's output and the loss"
        lines = [
            *(f"# {line_ref(s)} was: {s.code.strip()}" for s in sources),
            f"# between {span}, keep the values tensors: no .item(), .tolist() or .numpy()",
            f"# followed by {made}(...), which makes a new tensor with no history. E.g.",
            "# errors = [(p - t).abs().item() for p, t in zip(pred, y)]",
            f"# loss = {made}(errors).mean()",
            "loss = (pred - y).abs().mean()  # the same value, differentiable",
        ]
        title = "Stay in PyTorch: tensor ops instead of Python numbers, so autograd can follow"
    return Fix("stay_in_framework", title, "\n".join(lines))


def _places(sources: Sequence[SourceLine]) -> set[tuple[str, int]]:
    return {(s.file, s.line) for s in sources}


def reentry_call(back: SourceLine | None) -> str:
    """The call that made a tensor again on the user's line `back`, as written
    (`torch.from_numpy`, `torch.as_tensor`); `torch.tensor` when none is found."""
    call = find_call(back.code, TORCH_REENTRY_CALLS) if back is not None else None
    return f"{call.prefix}{call.name}" if call is not None else "torch.tensor"


def exclude_unused_parameters(groups: Sequence[LayerGroup], title: str, lead: str) -> Fix:
    """Freeze the parameters the loss does not depend on, or leave them out of the
    optimizer (the user's own optimizer: its class and settings are not rewritten here)."""
    listed = ", ".join(f'"{name}"' for name in variable_names(groups, "."))
    return Fix(
        "exclude_unused_variables",
        title,
        "\n".join(
            [
                f"# {lead}",
                f"unused = {{{listed}}}",
                "for name, parameter in model.named_parameters():",
                "    # the names above may start with the model's own name: match the rest",
                '    if name in unused or any(u.endswith("." + name) for u in unused):',
                "        parameter.requires_grad_(False)",
                "# optimizer.step() skips them (their .grad stays None); to leave them out of",
                "# it, build it from [p for p in model.parameters() if p.requires_grad]",
            ]
        ),
    )


def _value(call: Call | None) -> str:
    """The tensor a cast or rounding call converts, as written ("x" when unknown)."""
    value = _subject(call, "input") if call is not None else None
    return value if value is not None and is_identifier(value) else "x"


def _line_without(code: str, call: Call | None, value: str, example: str) -> str:
    """The user's line with the call replaced by the value it converts."""
    if call is None or not code:
        return example
    return f"{replace_span(code, call.start, call.end, value)}  # was: {call.text}"


def _straight_through(value: str, hard: str, what: str) -> Fix:
    """`value + (hard - value).detach()`: `hard` forward, the identity's gradient backward."""
    return Fix(
        "straight_through",
        f"Straight-through rounding: {what} forward, an identity gradient backward",
        f"y = {value} + ({hard} - {value}).detach()  # {what} forward, identity gradient backward",
    )
