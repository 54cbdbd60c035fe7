"""Fixes that several rules propose, built from the evidence so they name the user's setup."""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence, TrainingSetup
from gradient_doctor.core.findings import Fix, Origin
from gradient_doctor.core.knowledge.source.calls import find_call, replace_span
from gradient_doctor.core.knowledge.source.spelling import spell
from gradient_doctor.core.knowledge.wording import format_number


def constrain_weights(origin: Origin, weights_layer: str | None = None) -> Fix:
    """Bound the kernel of the layer whose output feeds the op.

    Args:
        origin: the op's `Origin`.
        weights_layer: the layer whose weights the replay saw feeding the op; None
            names the op's own layer, as the layer "in" which the feeding layer is.
    """
    if weights_layer:
        title = f"Bound the weights of `{weights_layer}`, whose output feeds {origin.op}"
        comment = f"# on `{weights_layer}`, which feeds {origin.op}:"
    else:
        where = f" in `{origin.layer}`" if origin.layer else ""
        title = f"Bound the weights of the layer{where} whose output feeds {origin.op}"
        comment = f"# on the Dense layer{where} that feeds {origin.op}:"
    return Fix(
        "constrain_weights",
        title,
        f"{comment}\n"
        "keras.layers.Dense(units, kernel_constraint=keras.constraints.MaxNorm(max_value=3.0))",
    )


def upstream_remedies(evidence: Evidence) -> tuple[Fix, ...]:
    """Remedies for what feeds the origin op: the feeding layer's weights, then the data.

    When the replay traced the op's inputs to the batch alone, no weight lies
    between, so bounding weights cannot help and only the data remedy is offered.
    """
    if evidence.weights_upstream is False:
        return (normalize_input(),)
    # The layer where the values blew up, when the replay saw them grow on the way.
    grew = evidence.growth[0] if evidence.growth else None
    layer = grew or evidence.weights_layer
    return (constrain_weights(evidence.origin, layer), normalize_input())


def normalize_input() -> Fix:
    """Standardise the input features so that no feature dominates."""
    return Fix(
        "normalize_input",
        "Standardise the input features so no feature drives the activations up",
        "normalizer = keras.layers.Normalization()\n"
        "normalizer.adapt(train_features)  # learns each feature's mean and variance\n"
        "x = normalizer(features)",
    )


def batch_normalization(target: str) -> Fix:
    """Normalise the activations that feed `target` (e.g. "MatMul", "each hidden layer")."""
    return Fix(
        "batch_normalization",
        f"Normalise the activations that feed {target}",
        "x = keras.layers.Dense(units)(x)\n"
        "x = keras.layers.BatchNormalization()(x)  # or LayerNormalization()",
    )


def better_init() -> Fix:
    """Initialise weights with a variance scaled to the layer size."""
    return Fix(
        "better_init",
        "Initialise weights with a variance scaled to the layer size",
        'keras.layers.Dense(units, kernel_initializer="he_normal")  # "glorot_uniform" for tanh',
    )


def lower_learning_rate(setup: TrainingSetup) -> Fix:
    """Lower the learning rate tenfold, from the user's rate when it is known."""
    if setup.learning_rate is None:
        return Fix(
            "lower_learning_rate",
            "Lower the learning rate 10x",
            "optimizer = keras.optimizers.Adam(learning_rate=1e-4)  # 10x lower than now",
        )
    was, lower = format_number(setup.learning_rate), format_number(setup.learning_rate / 10)
    return Fix(
        "lower_learning_rate",
        f"Lower the learning rate 10x, from {was} to {lower}",
        f"optimizer = keras.optimizers.Adam(learning_rate={lower})  # was {was}",
    )


def gradient_clipping(setup: TrainingSetup) -> Fix:
    """Clip the global gradient norm, noting clipping that is already on."""
    rate = format_number(setup.learning_rate) if setup.learning_rate is not None else "1e-3"
    title = "Clip the global gradient norm"
    if setup.clipping:
        title += f" (clipping is already on: {setup.clipping}; bound the global norm instead)"
    return Fix(
        "gradient_clipping",
        title,
        f"optimizer = keras.optimizers.Adam(learning_rate={rate}, global_clipnorm=1.0)",
    )


def float32_island(code: str, names: tuple[str, ...], focus: tuple[int, int] | None = None) -> Fix:
    """Compute the op in float32 even when the model runs in half precision.

    Args:
        code: str, the user's line ("" when unknown).
        names: tuple of str, the function names that create the op, e.g. ("exp",).
        focus: where on the line the op was made (`SourceLine.span`).
    """
    title = "Compute this op in float32 under mixed precision"
    call = find_call(code, names, focus) if names else None
    if call is None or not call.args:
        snippet = 'keras.layers.Dense(units, dtype="float32")  # this layer computes in float32'
        return Fix("float32_island", title, snippet)
    cast_name = spell(call, "cast")
    cast = call.render(tuple(f'{cast_name}({arg}, "float32")' for arg in call.args))
    rewritten = replace_span(code, call.start, call.end, cast)
    return Fix(
        "float32_island", title, f"{rewritten}  # the result is float32", rewrite=(rewritten,)
    )


def loss_scaling() -> Fix:
    """Scale the loss dynamically so half-precision gradients stay in range."""
    return Fix(
        "loss_scaling",
        "Use dynamic loss scaling: it skips steps whose gradients overflow and lowers the scale",
        "optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-3))",
    )


def activation_change(activation: str, why: str) -> Fix:
    """Use another activation in the hidden layers.

    Args:
        activation: str, the Keras name of the activation to use, e.g. "leaky_relu".
        why: str, what it avoids, e.g. "its units keep a small gradient when inactive".
    """
    return Fix(
        "activation_change",
        f'Use activation="{activation}" in the hidden layers: {why}',
        f'keras.layers.Dense(units, activation="{activation}", kernel_initializer="he_normal")',
    )
