"""Fixes that several rules propose, built from the evidence so they name the user's setup."""

from __future__ import annotations

from gradient_doctor.core.evidence import TrainingSetup
from gradient_doctor.core.findings import Fix, Origin
from gradient_doctor.core.knowledge.spelling import fill
from gradient_doctor.core.knowledge.source_rewrite import rewrite_argument
from gradient_doctor.core.knowledge.wording import format_number


def constrain_weights(origin: Origin) -> Fix:
    """Bound the kernel of the layer whose output feeds the op."""
    where = f" in `{origin.layer}`" if origin.layer else ""
    return Fix(
        "constrain_weights",
        f"Bound the weights of the layer{where} whose output feeds {origin.op}",
        f"# on the Dense layer{where} that feeds {origin.op}:\n"
        "keras.layers.Dense(units, kernel_constraint=keras.constraints.MaxNorm(max_value=3.0))",
    )


def normalize_input() -> Fix:
    """Standardise the input features so that no feature dominates."""
    return Fix(
        "normalize_input",
        "Standardise the input features so no feature drives the activations up",
        "normalizer = keras.layers.Normalization()\n"
        "normalizer.adapt(train_features)  # learns each feature's mean and variance\n"
        "x = normalizer(features)",
    )


def batch_normalization(origin: Origin) -> Fix:
    """Normalise the activations that feed the op."""
    return Fix(
        "batch_normalization",
        f"Normalise the activations that feed {origin.op}",
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


def guarded_call(
    family: str, title: str, code: str, names: tuple[str, ...], guard: str, fallback: str
) -> Fix:
    """A fix that wraps the first argument of the user's call in a guard.

    Args:
        family: str, the fix family id.
        title: str, the fix's one-line title.
        code: str, the user's line ("" when unknown).
        names: tuple of str, the function names that create the op, e.g. ("log",).
        guard: str, a `spelling.fill` template such as "{maximum}({arg}, 1e-7)".
        fallback: str, a generic line with such a call, rewritten when `code` has none.
    """
    def wrap(call, arg):
        return fill(guard, call, arg)

    rewritten = rewrite_argument(code, names, 0, wrap) or rewrite_argument(fallback, names, 0, wrap)
    return Fix(family, title, rewritten or fallback)


def float32_island(code: str, names: tuple[str, ...]) -> Fix:
    """Compute the op in float32 even when the model runs in half precision.

    Args:
        code: str, the user's line ("" when unknown).
        names: tuple of str, the function names that create the op, e.g. ("exp",).
    """
    cast = rewrite_argument(code, names, 0, lambda _, arg: f"tf.cast({arg}, tf.float32)")
    snippet = (
        f"{cast}  # the result is float32"
        if cast
        else 'keras.layers.Dense(units, dtype="float32")  # this layer computes in float32'
    )
    return Fix("float32_island", "Compute this op in float32 under mixed precision", snippet)


def loss_scaling() -> Fix:
    """Scale the loss dynamically so half-precision gradients stay in range."""
    return Fix(
        "loss_scaling",
        "Use dynamic loss scaling: it skips steps whose gradients overflow and lowers the scale",
        "optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-3))",
    )
