"""Fixes for a discrete step on the gradient path: argmax, sampling, lookups, casts, rounding."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.source.calls import (
    Call,
    assigned_name,
    find_calls,
    grouped,
    is_identifier,
    replace_span,
)
from gradient_doctor.core.knowledge.source.operators import find_binary

# A Keras `Embedding` layer's table; the fallback when the line names no table.
_TABLE = "embedding.embeddings"
# `embedded = self.token_embedding(ids)`: a layer called on one name.
_LAYER_CALL = re.compile(r"^\s*[A-Za-z_][\w.]*\s*=\s*([A-Za-z_][\w.]*)\(\s*([A-Za-z_][\w.]*)\s*\)")
# Comparison operators, longest first, and the side that must be larger for "true".
_COMPARISONS = ((">=", "left"), ("<=", "right"), (">", "left"), ("<", "right"))
_COMPARISON_CALLS = {
    "greater": "left",
    "greater_equal": "left",
    "less": "right",
    "less_equal": "right",
}


@dataclass(frozen=True)
class TokenChoice:
    """The names that fixes for a discrete token choice reuse from the user's line.

    Attributes:
        logits: the scores the tokens are chosen from, as written.
        axis: the vocabulary axis, as written.
        tokens: the name of the chosen tokens.
        probs: the name the soft tokens take.
        embedded: the name of the embedded tokens.
        table: the embedding table; None when the tokens are not embedded on the line.
        sampled: True when the user samples the tokens rather than taking the argmax.
        prelude: lines that name what the fix needs first (a logits expression).
    """

    logits: str
    axis: str
    tokens: str
    probs: str
    embedded: str
    table: str | None
    sampled: bool = False
    prelude: tuple[str, ...] = ()


def argmax_fixes(code: str, call: Call | None) -> tuple[Fix, ...]:
    """Fixes for tokens picked by argmax: soft embedding, Gumbel-softmax, policy gradient."""
    choice = _chosen(code, call, "input", sampled=False)
    return (
        soft_embedding(choice),
        gumbel_softmax(choice),
        reinforce(choice),
        straight_through(choice),
    )


def choice_fixes(code: str, call: Call | None) -> tuple[Fix, ...]:
    """Fixes for an index picked by argmax and used as a number, not looked up (a router's
    expert, a gate's branch made a mask): weight the options by the softmax instead, keep
    the hard pick forward with the softmax's gradient backward, or learn the pick by its
    reward."""
    choice = _chosen(code, call, "input", sampled=False)
    axis, picked = choice.axis, choice.tokens
    weights = f"{picked}_weights"
    one_hot_axis = "" if axis == "-1" else f", axis={axis}"
    use = (
        f"# where `{picked}` picks one option, weight each option by its column of "
        f"`{weights}` instead (a mask made of `{picked}` == k becomes {weights}[..., k])"
    )
    soft = [f"{weights} = tf.nn.softmax({choice.logits}, axis={axis})", use]
    hard = [
        f"soft = tf.nn.softmax({choice.logits}, axis={axis})",
        f"hard = tf.one_hot(tf.argmax(soft, axis={axis}), tf.shape(soft)[{axis}], "
        f"dtype=soft.dtype{one_hot_axis})",
        f"{weights} = soft + tf.stop_gradient(hard - soft)  # exactly one-hot forward",
        use,
    ]
    policy = [
        f"log_probs = tf.nn.log_softmax({choice.logits}, axis=-1)",
        "flat = tf.reshape(log_probs, [-1, tf.shape(log_probs)[-1]])",
        f"{picked} = tf.reshape(tf.random.categorical(flat, 1), tf.shape(log_probs)[:-1])"
        "  # sampled picks",
        f"chosen = tf.reduce_sum(log_probs * tf.one_hot({picked}, tf.shape(log_probs)[-1]), "
        "axis=-1)",
        f"reward = tf.stop_gradient(score)  # per example: how well `{picked}` did (your task's)",
        "loss += -tf.reduce_mean(chosen * (reward - tf.reduce_mean(reward)))",
    ]
    return (
        Fix(
            "soft_choice",
            "Weight the options by the softmax of the scores instead of picking one by its index",
            "\n".join([*choice.prelude, *soft]),
        ),
        Fix(
            "straight_through",
            "Straight-through estimator: the one-hot pick forward, the softmax's gradient backward",
            "\n".join([*choice.prelude, *hard]),
        ),
        Fix(
            "reinforce",
            "Policy gradient (REINFORCE): keep the discrete pick and weight its "
            "log-probability by the reward it earns",
            "\n".join([*choice.prelude, *policy]),
        ),
    )


def sampling_fixes(code: str, call: Call | None) -> tuple[Fix, ...]:
    """Fixes for sampled tokens, a differentiable sample (Gumbel-softmax) first."""
    choice = _chosen(code, call, "logits", sampled=True)
    return (
        gumbel_softmax(choice),
        straight_through(choice),
        reinforce(choice),
        soft_embedding(choice),
    )


def lookup_fixes(code: str, call: Call | None) -> tuple[Fix, ...]:
    """Fixes for generated token ids looked up in a table or turned one-hot."""
    choice = _looked_up(code, call)
    return (
        soft_embedding(choice),
        gumbel_softmax(choice),
        reinforce(choice),
        straight_through(choice),
    )


def soft_embedding(choice: TokenChoice) -> Fix:
    """Feed probabilities through the embedding table instead of token ids."""
    lines = [
        *choice.prelude,
        f"{choice.probs} = tf.nn.softmax({choice.logits}, axis={choice.axis})"
        "  # token probabilities, not ids",
        *_embedding_lines(choice),
    ]
    return Fix(
        "soft_embedding",
        "Feed soft one-hot probabilities through the embedding table instead of token ids",
        "\n".join(lines),
    )


def gumbel_softmax(choice: TokenChoice) -> Fix:
    """Draw a differentiable sample with the Gumbel-softmax."""
    lines = [
        *choice.prelude,
        "def gumbel_softmax(logits, temperature):",
        "    noise = -tf.math.log(-tf.math.log(tf.random.uniform(tf.shape(logits), 1e-9, 1.0)))",
        f"    return tf.nn.softmax((logits + noise) / temperature, axis={choice.axis})",
        "",
        f"{choice.probs} = gumbel_softmax({choice.logits}, temperature=0.5)"
        "  # anneal toward 0.1 in training",
        *_embedding_lines(choice),
    ]
    return Fix(
        "gumbel_softmax",
        "Sample with the Gumbel-softmax: a differentiable sample whose sharpness the "
        "temperature sets",
        "\n".join(lines),
    )


def straight_through(choice: TokenChoice) -> Fix:
    """Use one-hot tokens in the forward pass and the softmax's gradient in the backward."""
    axis = choice.axis
    one_hot_axis = "" if axis == "-1" else f", axis={axis}"
    soft = (
        f"gumbel_softmax({choice.logits}, temperature=0.5)  # from the gumbel_softmax fix"
        if choice.sampled
        else f"tf.nn.softmax({choice.logits}, axis={axis})"
    )
    lines = [
        *choice.prelude,
        f"soft = {soft}",
        f"hard = tf.one_hot(tf.argmax(soft, axis={axis}), tf.shape(soft)[{axis}], "
        f"dtype=soft.dtype{one_hot_axis})",
        f"{choice.probs} = soft + tf.stop_gradient(hard - soft)"
        "  # one-hot forward, softmax gradient backward",
        *_embedding_lines(choice),
    ]
    kind = "Straight-through Gumbel-softmax" if choice.sampled else "Straight-through estimator"
    return Fix(
        "straight_through",
        f"{kind}: exact one-hot tokens forward, the softmax's gradient backward",
        "\n".join(lines),
    )


def reinforce(choice: TokenChoice) -> Fix:
    """Keep discrete tokens and weight their log-probabilities by the reward they earn."""
    tokens = choice.tokens
    lines = [
        *choice.prelude,
        f"log_probs = tf.nn.log_softmax({choice.logits}, axis=-1)",
        "flat = tf.reshape(log_probs, [-1, tf.shape(log_probs)[-1]])",
        f"{tokens} = tf.reshape(tf.random.categorical(flat, 1), tf.shape(log_probs)[:-1])"
        "  # sampled tokens",
        f"chosen = tf.reduce_sum(log_probs * tf.one_hot({tokens}, tf.shape(log_probs)[-1]), "
        "axis=-1)",
        "sequence_log_prob = tf.reduce_sum(tf.reshape(chosen, [tf.shape(chosen)[0], -1]), axis=1)",
        "reward = tf.reshape(tf.stop_gradient(fake_output), [-1])"
        f"  # what {tokens} earn: a GAN's discriminator's verdict, a task's score",
        "gen_loss = -tf.reduce_mean(sequence_log_prob * (reward - tf.reduce_mean(reward)))",
    ]
    return Fix(
        "reinforce",
        "Policy gradient (REINFORCE): keep discrete tokens and weight their log-probabilities "
        "by the reward the tokens earn (a GAN's discriminator's verdict, a task's score)",
        "\n".join(lines),
    )


# A dtype argument naming an integer or bool dtype (`tf.int32`, "int64", `tf.bool`).
_DISCRETE_DTYPE = re.compile(r"\b(u?int\d*|bool)\b")


def cast_fixes(code: str, call: Call | None) -> tuple[Fix, ...]:
    """Fixes for a cast to an integer or bool dtype: stay float, or round straight-through.

    Of nested casts (`tf.cast(tf.cast(x, tf.int32), tf.float32)`), the one to an integer
    dtype is the one the fixes rewrite, whichever the replay's focus gave."""
    if call is None or not _DISCRETE_DTYPE.search(call.argument(1, "dtype") or ""):
        discrete = [
            found
            for found in find_calls(code, ("cast",))
            if _DISCRETE_DTYPE.search(found.argument(1, "dtype") or "")
        ]
        call = discrete[0] if len(discrete) == 1 else call
    return (
        _without_call(
            code,
            call,
            "Keep the value float: drop the cast to an integer dtype",
            "tf.cast(x, tf.int32)",
        ),
        _straight_through_rounding(code, call, cast=True),
    )


def rounding_fixes(code: str, call: Call | None) -> tuple[Fix, ...]:
    """Fixes for round, floor, ceil and sign: round straight-through, or keep it continuous."""
    return (
        _straight_through_rounding(code, call, cast=False),
        _without_call(
            code,
            call,
            "Keep the value continuous: drop the rounding from the path to the loss",
            "tf.round(x)",
        ),
    )


def comparison_fixes(code: str, call: Call | None) -> tuple[Fix, ...]:
    """A smooth step (a sigmoid) in the backward pass of a hard comparison."""
    left, right, larger, hard = "a", "b", "left", "a > b"
    found = _comparison(code, call)
    if found is not None:
        left, right, larger, hard = found
    high, low = (left, right) if larger == "left" else (right, left)
    lines = [
        f"soft = tf.sigmoid(({high} - {grouped(low)}) / 0.1)  # a smooth step; a smaller 0.1 "
        "is sharper",
        f"step = soft + tf.stop_gradient(tf.cast({hard}, soft.dtype) - soft)"
        "  # 0/1 forward, the sigmoid's gradient backward",
        f"# use `step` (a float) where the line used `{hard}`",
    ]
    return (
        Fix(
            "straight_through",
            "Straight-through comparison: the hard 0/1 forward, a sigmoid's gradient backward",
            "\n".join(lines),
        ),
    )


def _chosen(code: str, call: Call | None, keyword: str, sampled: bool) -> TokenChoice:
    """The names of an argmax or sampling line, e.g. `tokens = tf.argmax(logits, axis=-1)`."""
    logits = call.argument(0, keyword) if call is not None else None
    # top_k's second argument is k: it always chooses over the last axis.
    axis = call.argument(1, "axis") if call is not None and call.name != "top_k" else None
    axis = None if sampled else axis
    prelude: tuple[str, ...] = ()
    if logits is None:
        logits, prelude = "logits", ("# logits: the scores the tokens are chosen from",)
    elif not is_identifier(logits):
        logits, prelude = "logits", (f"logits = {logits}",)
    tokens = assigned_name(code) or "tokens"
    return TokenChoice(logits, axis or "-1", tokens, tokens, "embedded", _TABLE, sampled, prelude)


def _looked_up(code: str, call: Call | None) -> TokenChoice:
    """The names of a lookup of token ids: `tf.gather(table, ids)`, `self.embed(ids)`."""
    table: str | None = _TABLE
    ids = None
    if call is not None and call.name == "one_hot":
        ids, table = call.argument(0, "indices"), None
    elif call is not None:
        table = call.argument(0, "params") or _TABLE
        ids = call.argument(1, "indices") or call.argument(1, "ids")
    elif (layer := _LAYER_CALL.match(code)) is not None:
        table, ids = f"{layer.group(1)}.embeddings", layer.group(2)
    tokens = ids if ids is not None and is_identifier(ids) else "tokens"
    target = assigned_name(code) or "embedded"
    note = f"# logits: the scores `{tokens}` are chosen from (instead of `{tokens}` itself)"
    probs = target if table is None else "probs"
    return TokenChoice("logits", "-1", tokens, probs, target, table, prelude=(note,))


def _embedding_lines(choice: TokenChoice) -> list[str]:
    if choice.table is None:
        return []
    return [
        "# a one-hot row times the table is embedding(id): feed real tokens as "
        "tf.one_hot(ids, vocab_size)",
        f'{choice.embedded} = tf.einsum("...v,vd->...d", {choice.probs}, {choice.table})',
    ]


def _without_call(code: str, call: Call | None, title: str, example: str) -> Fix:
    """Replace the call on the user's line by its argument (the value stays float)."""
    if call is None or not call.args:
        return Fix("remove_cast", title, f"y = x  # instead of y = {example}")
    line = replace_span(code, call.start, call.end, call.args[0])
    return Fix("remove_cast", title, f"{line}  # was: {call.text}")


def _straight_through_rounding(code: str, call: Call | None, cast: bool) -> Fix:
    """Round in the forward pass, pass the gradient through unchanged in the backward."""
    what = "integer values" if cast else "the rounded value"
    title = f"Straight-through rounding: {what} forward, an identity gradient backward"
    note = f"  # {what} forward, identity gradient backward"
    if call is None or not call.args:
        return Fix("straight_through", title, f"y = x + tf.stop_gradient(tf.round(x) - x){note}")
    value, prelude = call.args[0], []
    if not is_identifier(value):
        prelude, value = [f"value = {value}"], "value"
    hard = call.with_argument(0, value)
    if cast:
        hard = f"tf.cast({hard}, {value}.dtype)"
    line = replace_span(code, call.start, call.end, f"{value} + tf.stop_gradient({hard} - {value})")
    return Fix("straight_through", title, "\n".join([*prelude, line + note]))


def _comparison(code: str, call: Call | None) -> tuple[str, str, str, str] | None:
    """Both sides of the line's ordering comparison, the larger side and the comparison."""
    for operator, larger in _COMPARISONS:
        binary = find_binary(code, operator)
        if binary is not None:
            return binary.left, binary.right, larger, binary.text
    if call is not None and call.name in _COMPARISON_CALLS and len(call.args) == 2:
        return call.args[0], call.args[1], _COMPARISON_CALLS[call.name], call.text
    return None
