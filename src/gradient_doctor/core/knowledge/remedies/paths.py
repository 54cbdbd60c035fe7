"""Fixes that put a value back on the tape or stop training variables the loss does not use."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gradient_doctor.core.findings import Fix, SourceLine
from gradient_doctor.core.knowledge.layer_groups import LayerGroup, variable_names
from gradient_doctor.core.knowledge.rewrites.numpy_calls import stay_in_tensorflow
from gradient_doctor.core.knowledge.source.calls import (
    Call,
    assigned_name,
    is_identifier,
    replace_span,
)
from gradient_doctor.core.knowledge.wording import line_ref

_CUSTOM_TITLE = "Give the step a gradient with tf.custom_gradient"
_STAY_TITLE = (
    "Stay in TensorFlow: TensorFlow ops instead of NumPy, so the tape can follow the value"
)


def compute_inside_tape(source: SourceLine | None) -> Fix:
    """Move the user's line into the `with tf.GradientTape()` block."""
    code = source.code.strip() if source is not None else "y = model(x, training=True)"
    target = assigned_name(code)
    lines = [
        "with tf.GradientTape() as tape:",
        f"    {code}  # moved inside: the tape records only what runs in the block",
    ]
    loss = target if target is not None and "loss" in target.lower() else None
    if loss is None:
        lines.append("    ...  # and every later step up to the loss")
    lines.append(f"grads = tape.gradient({loss or 'loss'}, model.trainable_variables)")
    return Fix(
        "compute_inside_tape",
        f"Compute `{code}` inside the `with tf.GradientTape()` block",
        "\n".join(lines),
    )


def numpy_round_trip_fix(left: SourceLine | None, back: SourceLine | None) -> Fix:
    """Rewrite the lines where a value left TensorFlow and came back, in TensorFlow ops.

    Args:
        left: the user's line whose result left TensorFlow, if known.
        back: the user's line where it came back, if known.

    Returns:
        A `stay_in_tensorflow` fix: the rewritten lines when either holds a NumPy
        round trip, else an example of the rewrite on the value that left.
    """
    lines: list[str] = []
    for source in (left, back):
        rewritten = stay_in_tensorflow(source.code.strip()) if source is not None else None
        if rewritten is None:
            continue
        lines += [f"# {line_ref(source)} was: {source.code.strip()}", rewritten]
        if "np." in rewritten:
            lines.append("# and write the remaining np.* call in TensorFlow ops")
    if lines:
        lines.append("# any function of yours on the way (a NumPy loss) must use tf.* ops too")
    else:
        name = (assigned_name(left.code.strip()) if left is not None else None) or "x"
        span = " and ".join(line_ref(s) for s in (left, back) if s is not None) or (
            "the model's output and the loss"
        )
        lines = [
            f"# between {span}, keep `{name}` in TensorFlow: no .numpy(), np.*, or",
            "# tf.constant(...) of a NumPy result. For example, instead of",
            f"# clipped = tf.constant(np.clip({name}.numpy(), 0.0, 1.0))",
            f"clipped = tf.clip_by_value({name}, 0.0, 1.0)",
        ]
    return Fix("stay_in_tensorflow", _STAY_TITLE, "\n".join(lines))


def py_function_fixes(code: str, call: Call | None) -> tuple[Fix, ...]:
    """Fixes for `tf.numpy_function`/`tf.py_function`: TensorFlow ops, or a custom gradient."""
    func = call.argument(0, "func") if call is not None else None
    inputs = call.argument(1, "inp") if call is not None else None
    if call is None or func is None or inputs is None:
        return (
            Fix("stay_in_tensorflow", _STAY_TITLE, "y = f(x)  # f written with tf.* ops"),
            Fix("custom_gradient", _CUSTOM_TITLE, _custom_gradient_code("y = f(x)", "x", "f")),
        )
    args = inputs.strip()[1:-1].strip() if inputs.strip()[:1] in "[(" else inputs
    name = func.rsplit(".", 1)[-1] if is_identifier(func) else "f"
    direct = replace_span(code, call.start, call.end, f"{func}({args})")
    wrapped = replace_span(code, call.start, call.end, f"{name}_with_gradient({args})")
    return (
        Fix(
            "stay_in_tensorflow",
            _STAY_TITLE,
            f"{direct}  # with {func} written in tf.* ops instead of np.*",
        ),
        Fix(
            "custom_gradient",
            _CUSTOM_TITLE,
            _custom_gradient_code(f"y = {call.text}", args, name) + f"\n\n{wrapped}",
        ),
    )


def no_gradient_fixes(code: str, call: Call | None) -> tuple[Fix, ...]:
    """For an op with no registered gradient: give it one with `tf.custom_gradient`."""
    body = "y = op(x)" + (f"  # the op on your line: {code}" if code else "")
    return (Fix("custom_gradient", _CUSTOM_TITLE, _custom_gradient_code(body, "x", "op")),)


def remove_stop_gradient(code: str, call: Call | None) -> tuple[Fix, ...]:
    """Drop the `tf.stop_gradient` on the user's line."""
    title = "Remove the stop_gradient if these variables must train"
    if call is None or not call.args:
        return (Fix("remove_stop_gradient", title, "y = x  # instead of y = tf.stop_gradient(x)"),)
    line = replace_span(code, call.start, call.end, call.args[0])
    return (Fix("remove_stop_gradient", title, f"{line}  # was: {call.text}", rewrite=(line,)),)


def watch_variables(groups: Sequence[LayerGroup]) -> Fix:
    """Have the tape watch the variables it was not watching (`tape_watch`): every one
    handed to the optimizer, or all it reads, as a tape does by default.

    Args:
        groups: the layers whose variables the tape was not watching.
    """
    layers = ", ".join(f"`{g.layer}`" for g in groups)
    lines = [
        "# let the tape watch the trainable variables it reads, as it does by default:",
        "with tf.GradientTape() as tape:",
        "    ...  # the forward pass and the loss",
        f"# or watch every variable you hand the optimizer ({layers} too), once they exist",
        "# (a Keras model builds its variables on its first call; a Keras 3 variable is",
        "# watched through the tf.Variable it holds, `v.value`):",
        "# with tf.GradientTape(watch_accessed_variables=False) as tape:",
        "#     tape.watch([v.value if isinstance(v, keras.Variable) else v for v in variables])",
    ]
    return Fix("tape_watch", "Watch every variable the optimizer updates", "\n".join(lines))


def exclude_unused_variables(groups: Sequence[LayerGroup], title: str, lead: str) -> Fix:
    """Hand the optimizer only the variables the loss depends on.

    Args:
        groups: the layers whose variables get no gradient.
        title: str, the fix's title.
        lead: str, a comment line that opens the code (what else the user can do).

    Returns:
        An `exclude_unused_variables` fix that filters out exactly these variables (a
        layer's prefix would take its other variables too, which may train).
    """
    listed = ", ".join(f'"{name}"' for name in variable_names(groups, "/"))
    lines = [
        f"# {lead}",
        f"unused = {{{listed}}}",
        "variables = [v for v in model.trainable_variables if v.path not in unused]",
        "grads = tape.gradient(loss, variables)",
        "optimizer.apply_gradients(zip(grads, variables))",
        "# with model.fit: layer.trainable = False before compile() for a layer that should",
        "# not train; a variable its layer never reads: do not create it in build()",
    ]
    return Fix("exclude_unused_variables", title, "\n".join(lines))


def _custom_gradient_code(body: str, args: str, name: str) -> str:
    """A `tf.custom_gradient` wrapper `{name}_with_gradient({args})` around `body`."""
    return "\n".join(
        [
            "@tf.custom_gradient",
            f"def {name}_with_gradient({args}):",
            f"    {body}",
            "    def grad(upstream):",
            "        return upstream  # its derivative times upstream; identity = straight-through",
            "    return y, grad",
        ]
    )


# `name.train_on_batch(` or `name.fit(` on the user's line: the model trained there.
_TRAINED_MODEL = re.compile(r"([A-Za-z_][\w.]*)\.(train_on_batch|fit)\(")


def unfreeze_model(trained_at: SourceLine | None) -> Fix:
    """Make a frozen Keras model trainable around its own training (`trainable` read when
    its step is built and, in Keras 3, each time it changes), frozen again for the
    combined model's: the line that trains it, with the two settings around it."""
    code = trained_at.code.strip() if trained_at is not None and trained_at.code else ""
    found = _TRAINED_MODEL.search(code)
    model = found.group(1) if found else "discriminator"
    call = code if found else f"{model}.train_on_batch(x, y)"
    return Fix(
        "unfreeze_model",
        f"Make `{model}` trainable for its own training step (frozen again for a combined "
        "model's, where one trains with it frozen)",
        "\n".join(
            [
                f"{model}.trainable = True  # before its own train_on_batch / fit",
                call,
                f"{model}.trainable = False  # only before a combined model's step (a GAN's)",
            ]
        ),
    )
