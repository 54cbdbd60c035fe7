"""Per-layer statistics measured inside real compiled steps, and the warnings they feed."""

import keras
import numpy as np
import pytest

from gradient_doctor import Doctor


def _fit(layers, steps, batch=8, seed=0, **compile_args):
    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(steps * batch, 6)).astype("float32")
    y = rng.normal(size=(steps * batch, 1)).astype("float32")
    model = keras.Sequential([keras.Input((6,)), *layers, keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse", **compile_args)
    doctor = Doctor(verbose=False)
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0, callbacks=[doctor])
    return model, doctor


@pytest.fixture(scope="module", params=[False, True], ids=["graph", "xla"])
def eleven_steps(request):
    # Under XLA the sampled statistics and the measured update are separate branches
    # (`xla_branches`): they must give the same values.
    layers = [keras.layers.Dense(5, activation="relu"), keras.layers.Dense(4, activation="tanh")]
    return _fit(layers, steps=11, jit_compile=request.param)


def test_weight_norms_are_the_layers_weights_after_the_sampled_step(eleven_steps):
    model, doctor = eleven_steps
    sampled = {r.layer: r for r in doctor.watcher.guard.layer_stats.read()}
    for layer in model.layers:
        expected = np.sqrt(sum(np.sum(np.square(w.numpy())) for w in layer.trainable_weights))
        record = sampled[layer.trainable_weights[0].path.rsplit("/", 1)[0]]
        np.testing.assert_allclose(record.weight_norm, expected, rtol=1e-5)


def test_activations_are_put_with_the_layer_that_computes_them(eleven_steps):
    model, doctor = eleven_steps
    sampled = {r.layer.rsplit("/", 1)[1]: r for r in doctor.watcher.guard.layer_stats.read()}
    relu, tanh, linear = (layer.name for layer in model.layers)
    assert sampled[relu].dead_fraction is not None and sampled[relu].saturated_fraction is None
    assert sampled[tanh].saturated_fraction is not None and sampled[tanh].dead_fraction is None
    assert sampled[linear].activation_max_abs is None  # no activation op of its own
    assert sampled[relu].activation_max_abs > 0


def test_each_steps_layer_gradient_norms_add_up_to_the_global_norm(eleven_steps):
    _, doctor = eleven_steps
    history = doctor.watcher.guard.layer_stats.read_grad_norms()
    assert len(history) == 10  # one row per step since the last read
    newest = history[-1]
    assert len(newest) == 3
    global_norm = doctor.watcher.guard.read().grad_norm
    np.testing.assert_allclose(np.sqrt(sum(r.grad_norm**2 for r in newest)), global_norm, rtol=1e-5)


def test_a_relu_layer_whose_units_all_died_is_warned_about():
    dead = keras.layers.Dense(
        5, activation="relu", bias_initializer=keras.initializers.Constant(-50.0)
    )
    _, doctor = _fit([dead], steps=230)
    report = doctor.report()
    # Dead from the first step, its zero gradients are a problem at once; the warning the
    # layer statistics raise later says the same and is left out of the report.
    found = [f for f in (*report.problems, *report.warnings) if f.category == "dead_units"]
    assert len(found) == 1
    assert dead.name in found[0].explanation


def test_a_tanh_layer_stuck_at_plus_or_minus_one_is_warned_about():
    stuck = keras.layers.Dense(
        5,
        activation="tanh",
        kernel_initializer=keras.initializers.Constant(0.0),
        bias_initializer=keras.initializers.Constant(20.0),
    )
    _, doctor = _fit([stuck], steps=230)
    report = doctor.report()
    # Stuck from the first step, as the dead ReLUs above: one finding, a problem.
    found = [f for f in (*report.problems, *report.warnings) if f.category == "saturation"]
    assert len(found) == 1
    assert stuck.name in found[0].explanation


def test_the_cheap_mode_measures_no_layers():
    from gradient_doctor.tf_adapter.watcher import Watcher

    assert Watcher(layer_stats=False).guard.layer_stats is None
    with pytest.raises(TypeError, match="layer_stats"):
        Watcher(layer_stats="yes")


def test_update_ratio_is_the_sgd_step_over_the_weight_norm(eleven_steps):
    _, doctor = eleven_steps
    stats = doctor.watcher.guard.layer_stats
    sampled = {r.layer: r for r in stats.read()}
    newest = {r.layer: r.grad_norm for r in stats.read_grad_norms()[-1]}
    for layer, record in sampled.items():
        # SGD(0.01) moves each layer by 0.01 times its gradient: the update's norm.
        np.testing.assert_allclose(
            record.update_ratio * record.weight_norm, 0.01 * newest[layer], rtol=1e-4
        )
