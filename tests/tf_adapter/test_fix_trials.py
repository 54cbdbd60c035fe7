"""Fix trials on real tiny models: the patch runs as written, and the user's model is untouched."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from gradient_doctor import Doctor
from gradient_doctor.core.findings import Edit
from gradient_doctor.core.source_frames import display_path
from gradient_doctor.tf_adapter.trials.patched_source import NotPatchable, patched_functions

THIS_FILE = display_path(__file__)


def _roots(x):
    return tf.sqrt(x) + tf.sqrt(x + 1.0)  # the line the patch rewrites


def _line_of(text: str) -> int:
    lines = open(__file__).read().splitlines()
    return next(n for n, line in enumerate(lines, 1) if text in line and "_line_of" not in line)


def test_the_patched_function_runs_the_patch_as_written_and_gets_its_code_back():
    line = _line_of("the line the patch rewrites")
    code = open(__file__).read().splitlines()[line - 1]
    edit = Edit(
        THIS_FILE, line, line, (code.replace("tf.sqrt(x) +", "tf.sqrt(x + 3.0) +"),), (code,)
    )
    original = _roots.__code__
    with patched_functions([edit]) as placed:
        traced = tf.function(_roots)(tf.constant(1.0))  # AutoGraph reads the patched copy
        eager = _roots(tf.constant(1.0))
    assert placed.functions == ["_roots"] and placed.met
    np.testing.assert_allclose([traced.numpy(), eager.numpy()], [2.0 + 2**0.5] * 2, rtol=1e-6)
    assert _roots.__code__ is original
    np.testing.assert_allclose(_roots(tf.constant(1.0)).numpy(), 1.0 + 2**0.5, rtol=1e-6)


def test_a_patch_of_module_level_code_cannot_be_run_again_in_process():
    line = _line_of("THIS_FILE = display_path")
    code = open(__file__).read().splitlines()[line - 1]
    with pytest.raises(NotPatchable, match="module level"):
        with patched_functions([Edit(THIS_FILE, line, line, (code + "  # x",), (code,))]):
            pass


class _Distance(keras.layers.Layer):
    """Length of each row of a projection: tf.norm, singular at a zero row."""

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], 4), initializer="ones")

    def call(self, x):
        h = tf.matmul(x, self.kernel)
        return tf.norm(h, axis=-1, keepdims=True)


def _fit(trial_steps):
    keras.utils.set_random_seed(3)
    x = np.random.default_rng(0).normal(size=(64, 3)).astype("float32")
    x[37] = 0.0  # batch 4 (of 8) holds a zero row: the norm's gradient is 0/0 there
    y = np.ones((64, 1), "float32")
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dropout(0.1), _Distance(), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    doctor = Doctor(verbose=False, trial_steps=trial_steps)
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[doctor])
    return model, doctor.report()


@pytest.fixture(scope="module")
def fitted_with_trials():
    return _fit(trial_steps=30)


def test_safe_norm_is_verified_on_a_zero_row(fitted_with_trials):
    _, report = fitted_with_trials
    problem = report.problems[0]
    assert (problem.category, problem.origin.op, problem.step) == (
        "backward_singularity",
        "SqrtGrad",
        4,
    )
    fix = next(f for f in problem.fixes if f.family == "safe_norm")
    assert fix.verified is True, fix.evidence
    assert "all 30 steps finite" in fix.evidence
    assert (
        "+        return tf.sqrt(tf.reduce_sum(tf.square(h), axis=-1, keepdims=True) + 1e-12)"
        in (fix.patch.splitlines())
    )


def test_trials_leave_the_model_and_optimizer_as_training_left_them(fitted_with_trials):
    tried, _ = fitted_with_trials
    untried, report = _fit(trial_steps=0)
    assert all(f.verified is None for f in report.problems[0].fixes)
    # Every variable, the dropout's seed state included (trials step it back, then restore).
    assert any(v.dtype.startswith("uint") or "int" in v.dtype for v in tried.variables)
    for a, b in zip(tried.variables, untried.variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(tried.optimizer.variables, untried.optimizer.variables, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_trial_from_an_earlier_state_meets_the_failing_batch_at_the_failing_step():
    # `fit` shuffles: its data read anew comes in another order than the run's, so a
    # trial from step 2 through failing step 5 once never met the batch that failed
    # there, and a lower learning rate "held" on batches that never failed.
    from gradient_doctor.core.trial_start import TrialStart
    from gradient_doctor.tf_adapter.localize.step_context import StepCall
    from gradient_doctor.tf_adapter.trials.fix_trials import LastGoodState, TrialSource

    data = [f"batch{i}" for i in range(8)]
    state = LastGoodState(StepCall(lambda batch: batch, ("failing",)), None, lambda: iter(data))
    source = TrialSource(TrialStart(2, "before the trouble"), object(), None, 5, beyond=4)
    origins = [(args[0], origin) for args, _, origin in state._batches(source)]
    assert len(origins) == source.steps == 7
    assert origins[3] == ("failing", "failing")  # trial step 3 is the run's step 5
    assert [origin for _, origin in origins].count("failing") == 1
    assert origins[:3] == [("batch2", "data"), ("batch3", "data"), ("batch4", "data")]
    # From the last good state, the failing batch comes first.
    last_good = TrialSource(TrialStart(5, ""), None, None, 5, beyond=3)
    assert next(state._batches(last_good))[2] == "failing"


def test_trials_started_from_the_api_name_its_argument_to_change_their_length(capsys):
    doctor = Doctor(trial_steps=20)  # verbose, as a user's callback is
    doctor.watcher.session.on_trials(3, 20, 41)
    said = capsys.readouterr().err
    assert "trying 3 remedies" in said
    assert "(trial_steps=N to change, 0 to skip)" in said
    assert "--trial-steps" not in said
