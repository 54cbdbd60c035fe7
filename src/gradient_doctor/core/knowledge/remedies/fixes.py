"""Fixes that several rules propose, built from the evidence so they name the user's setup.

Each is spelled in the framework the user trains with (`framework`, "tf" or "torch";
`TrainingSetup.framework` for those built from the setup): Keras's layers and
optimizers for TensorFlow, PyTorch's modules, `torch.nn.utils` and the user's own
optimizer class for PyTorch.
"""

from __future__ import annotations

from gradient_doctor.core.evidence import Evidence, TrainingSetup
from gradient_doctor.core.findings import Fix, Origin
from gradient_doctor.core.knowledge.rewrites.layer import MAX_NORM
from gradient_doctor.core.knowledge.source.calls import Call, find_call, is_identifier, replace_span
from gradient_doctor.core.knowledge.source.spelling import namespace, spell
from gradient_doctor.core.knowledge.wording import format_number


def constrain_weights(
    origin: Origin, weights_layer: str | None = None, framework: str = "tf"
) -> Fix:
    """Bound the kernel of the layer whose output feeds the op.

    In PyTorch, which has no kernel constraint, each unit's incoming weights are
    renormalised to the same bound after every update (`renorm_` along the output
    dim of a `Linear`'s weight is Keras's `MaxNorm` on its kernel's units).

    Args:
        origin: the op's `Origin`.
        weights_layer: the layer whose weights the replay saw feeding the op; None
            names the op's own layer, as the layer "in" which the feeding layer is.
        framework: "tf" or "torch".
    """
    op = origin.reported_op
    if weights_layer and weights_layer == origin.layer:  # the op is the layer's own
        title = f"Bound the weights of `{weights_layer}`, which computes {op} itself"
        comment = f"# on `{weights_layer}`, which computes {op}:"
    elif weights_layer:
        title = f"Bound the weights of `{weights_layer}`, whose output feeds {op}"
        comment = f"# on `{weights_layer}`, which feeds {op}:"
    else:  # the replay named no layer: say which one only as far as it is known
        where = f" in `{origin.layer}`" if origin.layer else ""
        title = f"Bound the weights of the layer{where} whose output feeds {op}, if one does"
        comment = f"# on the layer{where} whose output feeds {op} (the replay named none):"
    if framework == "torch":
        module = weights_layer or origin.layer
        layer = f'model.get_submodule("{module}")' if module else "layer"
        # Every weight of the module (a Linear's, an RNN's weight_ih/weight_hh, a conv's
        # filters): each output unit's incoming weights renormalised along dim 0.
        return Fix(
            "constrain_weights",
            title,
            f"# after each optimizer.step(), on {f'`{module}`' if module else 'the layer'}"
            f" that feeds {op} (model: your model):\n"
            "with torch.no_grad():\n"
            f"    for name, weight in {layer}.named_parameters():\n"
            '        if "weight" in name:  # each unit\'s incoming weights to norm <= 3\n'
            f"            weight.renorm_(2, 0, {MAX_NORM})",
        )
    return Fix(
        "constrain_weights",
        title,
        f"{comment}\n"
        "keras.layers.Dense(units, kernel_constraint=keras.constraints.MaxNorm(max_value=3.0))",
    )


def constrain_variable(origin: Origin, variable: str, framework: str = "tf") -> Fix:
    """Bound the values of a variable no layer owns (a parameter set on the root module
    itself, a free tensor the optimizer trains), which feeds the op.

    No layer's line builds it, so no constraint can be written there and no patch is
    offered: its values are clamped after every update, where the user steps.

    Args:
        origin: the op's `Origin`.
        variable: the variable's name as the report gives it ("scale", "optimizer0.param3").
        framework: "tf" or "torch".
    """
    noun = "parameter" if framework == "torch" else "variable"
    title = f"Bound the {noun} `{variable}`, whose values feed {origin.reported_op}"
    why = f"# `{variable}` belongs to no layer: no layer's line to constrain, so no patch;"
    bound = MAX_NORM
    if framework == "torch":
        attribute = "." not in variable and is_identifier(variable)
        target = f"model.{variable}" if attribute else "w"
        named = " (model: your model)" if attribute else f" (w: the tensor `{variable}`)"
        return Fix(
            "constrain_weights",
            title,
            f"{why}\n# after each optimizer.step(){named}:\n"
            "with torch.no_grad():\n"
            f"    {target}.clamp_(-{bound}, {bound})  # each value to |x| <= {bound}",
        )
    return Fix(
        "constrain_weights",
        title,
        f"{why}\n# after each optimizer.apply_gradients(...) (v: the variable `{variable}`):\n"
        f"v.assign(tf.clip_by_value(v, -{bound}, {bound}))  # each value to |x| <= {bound}",
    )


# Input features whose largest magnitude is at most this are near unit scale already
# (standardised features, pixels in [0, 1]).
UNIT_SCALE = 10.0


def upstream_remedies(evidence: Evidence) -> tuple[Fix, ...]:
    """Remedies for what feeds the origin op: the feeding layer's weights, then the data.

    When the replay traced the op's inputs to the batch alone, no weight lies
    between, so bounding weights cannot help and only the data remedy is offered; nor
    when the variable that feeds the op already lay within the bound at the failing
    step (a clamp to it would have changed none of its values: the step computes the
    same). The data remedy is left out when the batch's features were near unit scale
    already (standardising them changes little); weights then carry the values up.
    """
    framework = evidence.setup.framework
    largest = evidence.weights_variable_largest
    within = evidence.weights_variable is not None and largest is not None and largest <= MAX_NORM
    # Features already near unit scale: standardising them changes little, so their
    # remedy is not offered (it is when their scale is unknown).
    scale = evidence.input_scale[1] if evidence.input_scale is not None else None
    data = () if scale is not None and scale <= UNIT_SCALE else (normalize_input(framework),)
    if evidence.weights_upstream is False:
        return (normalize_input(framework),)
    if within:
        return data
    # The layer where the values blew up, when the replay saw them grow on the way.
    grew = evidence.growth[0] if evidence.growth else None
    layer = grew or evidence.weights_layer
    if evidence.weights_variable is not None:
        bound = constrain_variable(evidence.origin, evidence.weights_variable, framework)
    else:
        bound = constrain_weights(evidence.origin, layer, framework)
    return (bound, *data)


def normalize_input(framework: str = "tf") -> Fix:
    """Standardise the input features so that no feature dominates."""
    if framework == "torch":
        return Fix(
            "normalize_input",
            "Standardise the input features so no feature drives the activations up",
            "# once, from the training features (a tensor of shape [examples, features]):\n"
            "mean, std = train_x.mean(0), train_x.std(0) + 1e-7\n"
            "x = (x - mean) / std  # each batch, before it goes into the model",
        )
    return Fix(
        "normalize_input",
        "Standardise the input features so no feature drives the activations up",
        "normalizer = keras.layers.Normalization()\n"
        "normalizer.adapt(train_features)  # learns each feature's mean and variance\n"
        "x = normalizer(features)",
    )


def normalize_target(framework: str = "tf") -> Fix:
    """Train on standardised regression targets, and map predictions back."""
    title = "Standardise the regression targets, and map the predictions back to their units"
    if framework == "torch":
        return Fix(
            "normalize_target",
            title,
            "# once, from the training targets:\n"
            "y_mean, y_std = train_y.mean(0), train_y.std(0)\n"
            "loss = loss_fn(model(x), (y - y_mean) / y_std)  # learn standardised targets\n"
            "prediction = model(x_new) * y_std + y_mean  # back in the targets' units",
        )
    return Fix(
        "normalize_target",
        title,
        "y_mean, y_std = y_train.mean(axis=0), y_train.std(axis=0)\n"
        "model.fit(x_train, (y_train - y_mean) / y_std)  # learn standardised targets\n"
        "predictions = model.predict(x_new) * y_std + y_mean  # back in the targets' units",
    )


def batch_normalization(target: str, framework: str = "tf") -> Fix:
    """Normalise the activations that feed `target` (e.g. "MatMul", "each hidden layer")."""
    if framework == "torch":
        return Fix(
            "batch_normalization",
            f"Normalise the activations that feed {target}",
            "nn.Sequential(nn.Linear(d_in, units), nn.BatchNorm1d(units), nn.ReLU())"
            "  # or nn.LayerNorm(units)",
        )
    return Fix(
        "batch_normalization",
        f"Normalise the activations that feed {target}",
        "x = keras.layers.Dense(units)(x)\n"
        "x = keras.layers.BatchNormalization()(x)  # or LayerNormalization()",
    )


def better_init(framework: str = "tf", zero_biases: bool = False) -> Fix:
    """Initialise weights with a variance scaled to the layer size (`zero_biases`: and
    the biases at 0, for units an initial bias keeps below their threshold)."""
    title = "Initialise weights with a variance scaled to the layer size"
    if zero_biases:
        title += ", and start the biases at 0"
    if framework == "torch":
        code = 'torch.nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")'
        code += "  # xavier_uniform_ for tanh"
        if zero_biases:
            code += "\ntorch.nn.init.zeros_(layer.bias)  # not a negative constant"
        return Fix("better_init", title, code)
    code = 'keras.layers.Dense(units, kernel_initializer="he_normal")  # "glorot_uniform" for tanh'
    if zero_biases:
        code = 'keras.layers.Dense(units, kernel_initializer="he_normal", bias_initializer="zeros")'
    return Fix("better_init", title, code)


def lower_learning_rate(setup: TrainingSetup) -> Fix:
    """Lower the learning rate tenfold, from the user's rate when it is known (with the
    user's own optimizer class in PyTorch)."""
    if setup.framework == "torch":
        return _torch_lower_learning_rate(setup)
    kind = setup.optimizer or "Adam"
    if setup.learning_rate is None:
        return Fix(
            "lower_learning_rate",
            "Lower the learning rate 10x",
            f"optimizer = keras.optimizers.{kind}(learning_rate=1e-4)  # 10x lower than now",
        )
    was, lower = format_number(setup.learning_rate), format_number(setup.learning_rate / 10)
    return Fix(
        "lower_learning_rate",
        f"Lower the learning rate 10x, from {was} to {lower}",
        f"optimizer = keras.optimizers.{kind}(learning_rate={lower})  # was {was}",
    )


def _torch_lower_learning_rate(setup: TrainingSetup) -> Fix:
    if setup.own_update:  # no optimizer: the rate is the script's own name
        return Fix(
            "lower_learning_rate",
            "Lower the learning rate of your own update 10x",
            "w -= (lr / 10) * w.grad  # in your update of each tensor, under torch.no_grad()",
        )
    kind = setup.optimizer or "Adam"
    if setup.learning_rate is None:
        return Fix(
            "lower_learning_rate",
            "Lower the learning rate 10x",
            f"optimizer = torch.optim.{kind}(model.parameters(), lr=1e-4)  # 10x lower than now",
        )
    was, lower = format_number(setup.learning_rate), format_number(setup.learning_rate / 10)
    return Fix(
        "lower_learning_rate",
        f"Lower the learning rate 10x, from {was} to {lower}",
        f"optimizer = torch.optim.{kind}(model.parameters(), lr={lower})  # was {was}",
    )


def gradient_clipping(setup: TrainingSetup) -> Fix:
    """Clip the global gradient norm, noting clipping that is already on."""
    if setup.framework == "torch" and setup.own_update:
        return Fix(
            "gradient_clipping",
            "Clip the global gradient norm",
            "loss.backward()\n"
            "torch.nn.utils.clip_grad_norm_([w, b], max_norm=1.0)  # the tensors you update\n"
            "# then your own update, w -= lr * w.grad, ...",
        )
    if setup.framework == "torch":
        return Fix(
            "gradient_clipping",
            "Clip the global gradient norm",
            "loss.backward()\n"
            "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)\n"
            "optimizer.step()",
        )
    rate = format_number(setup.learning_rate) if setup.learning_rate is not None else "1e-3"
    title = "Clip the global gradient norm"
    if setup.clipping:
        title += f" (clipping is already on: {setup.clipping}; bound the global norm instead)"
    return Fix(
        "gradient_clipping",
        title,
        f"optimizer = keras.optimizers.Adam(learning_rate={rate}, global_clipnorm=1.0)",
    )


def float32_island(
    code: str,
    names: tuple[str, ...],
    focus: tuple[int, int] | None = None,
    framework: str = "tf",
) -> Fix:
    """Compute the op in float32 even when the model runs in half precision.

    Args:
        code: str, the user's line ("" when unknown).
        names: tuple of str, the function names that create the op, e.g. ("exp",).
        focus: where on the line the op was made (`SourceLine.span`).
        framework: "tf" or "torch" (PyTorch's line casts with `.float()`).
    """
    title = "Compute this op in float32 under mixed precision"
    call = find_call(code, names, focus) if names else None
    if framework == "torch" or namespace(call) == "torch":
        return _torch_float32_island(code, call, title)
    if call is None or not call.args:
        snippet = 'keras.layers.Dense(units, dtype="float32")  # this layer computes in float32'
        return Fix("float32_island", title, snippet)
    cast_name = spell(call, "cast")
    cast = call.render(tuple(f'{cast_name}({arg}, "float32")' for arg in call.args))
    rewritten = replace_span(code, call.start, call.end, cast)
    return Fix(
        "float32_island", title, f"{rewritten}  # the result is float32", rewrite=(rewritten,)
    )


def _torch_float32_island(code: str, call: Call | None, title: str) -> Fix:
    """The op's inputs cast to float32 on the user's line, or autocast turned off."""
    if call is None or not call.args:
        snippet = (
            "with torch.autocast(device_type=x.device.type, enabled=False):  # this op in float32\n"
            "    y = op(x.float())"
        )
        return Fix("float32_island", title, snippet)
    cast = call.render(tuple(f"{_bracketed(arg)}.float()" for arg in call.args))
    rewritten = replace_span(code, call.start, call.end, cast)
    return Fix(
        "float32_island", title, f"{rewritten}  # the result is float32", rewrite=(rewritten,)
    )


def _bracketed(arg: str) -> str:
    return arg if all(map(is_identifier, arg.split("."))) else f"({arg})"


_LOSS_SCALING = (
    "Use dynamic loss scaling: it skips steps whose gradients overflow and lowers the scale"
)


def loss_scaling(framework: str = "tf") -> Fix:
    """Scale the loss dynamically so half-precision gradients stay in range."""
    if framework == "torch":
        return Fix(
            "loss_scaling",
            _LOSS_SCALING,
            "scaler = torch.amp.GradScaler()  # once\n"
            "scaler.scale(loss).backward()\n"
            "scaler.step(optimizer)\n"
            "scaler.update()",
        )
    return Fix(
        "loss_scaling",
        _LOSS_SCALING,
        "optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-3))",
    )


# Keras's activation names -> PyTorch's modules.
_TORCH_ACTIVATIONS = {
    "relu": "nn.ReLU()",
    "leaky_relu": "nn.LeakyReLU(0.01)",
    "elu": "nn.ELU()",
    "selu": "nn.SELU()",
    "gelu": "nn.GELU()",
    "silu": "nn.SiLU()",
    "swish": "nn.SiLU()",
    "tanh": "nn.Tanh()",
    "sigmoid": "nn.Sigmoid()",
}


def activation_change(activation: str, why: str, framework: str = "tf") -> Fix:
    """Use another activation in the hidden layers.

    Args:
        activation: str, the Keras name of the activation to use, e.g. "leaky_relu".
        why: str, what it avoids, e.g. "its units keep a small gradient when inactive".
        framework: "tf" or "torch" (PyTorch's module for it).
    """
    module = _TORCH_ACTIVATIONS.get(activation)
    if framework == "torch" and module is not None:
        init = "leaky_relu" if activation == "leaky_relu" else "relu"
        return Fix(
            "activation_change",
            f"Use {module} in the hidden layers: {why}",
            f"nn.Sequential(nn.Linear(d_in, units), {module})"
            f'  # with torch.nn.init.kaiming_normal_(weight, nonlinearity="{init}")',
        )
    return Fix(
        "activation_change",
        f'Use activation="{activation}" in the hidden layers: {why}',
        f'keras.layers.Dense(units, activation="{activation}", kernel_initializer="he_normal")',
    )
