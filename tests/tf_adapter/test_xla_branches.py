"""Under XLA on a CPU, the guarded update and the sampled statistics stay conditionals.

XLA turns a two-branch conditional of elementwise work into selects that run both
branches on every step; these tests read the optimized HLO that XLA compiled for a
watched step and check that the doctor's branches are still conditionals, so that
the update is not computed twice and the one-step-in-ten statistics are not
computed on every step.
"""

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

import gradient_doctor  # noqa: E402
from gradient_doctor.tf_adapter.step import xla_branches  # noqa: E402

X = np.random.default_rng(0).normal(size=(8, 3)).astype("float32")
Y = np.ones((8, 1), "float32")

pytestmark = pytest.mark.skipif(
    bool(tf.config.list_logical_devices("GPU")), reason="XLA's selects are kept on a GPU"
)


def _watched_xla_step(layer_stats: bool):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    )
    optimizer = keras.optimizers.Adam(0.01)

    @tf.function(jit_compile=True)
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    step = gradient_doctor.watch(
        train_step, optimizer=optimizer, verbose=False, layer_stats=layer_stats
    )
    losses = [float(step(X, Y)) for _ in range(12)]
    return train_step, step, losses


def _conditionals(train_step) -> list[str]:
    hlo = train_step.experimental_get_compiler_ir(X, Y)(stage="optimized_hlo")
    return [line for line in hlo.splitlines() if " conditional(" in line]


def test_the_guarded_update_stays_a_conditional_in_the_cheap_mode():
    train_step, step, losses = _watched_xla_step(layer_stats=False)
    assert len(_conditionals(train_step)) == 1
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert step.report().status == "healthy"


def test_full_mode_keeps_the_update_and_the_sampled_statistics_conditionals():
    train_step, step, _ = _watched_xla_step(layer_stats=True)
    # The update (skip / update / update and measure) and the sampled statistics.
    assert len(_conditionals(train_step)) == 2
    stats = step.watcher.guard.layer_stats
    records = stats.read()
    assert records and all(r.update_ratio is not None and r.update_ratio > 0 for r in records)


def test_outside_xla_values_pass_unmarked():
    value = tf.constant(True)
    assert xla_branches.keep_branch(value) is value
    assert not xla_branches.branches_kept()
