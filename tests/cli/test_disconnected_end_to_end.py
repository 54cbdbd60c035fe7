"""Missing gradients through the real CLI: which variables, where the path breaks, healthy cases."""

import pytest

from tests.conftest import line_of

pytestmark = pytest.mark.slow


def _disconnected(run):
    problem = run.problem
    assert problem["category"] == "disconnected_gradients", problem
    return problem, problem["disconnected"]


def test_story4_argmax_breaks_every_generator_variable_at_one_line(doctor_run):
    script = "examples/story4_text_gan_argmax.py"
    run = doctor_run(script)
    assert run.exit_code == 1
    assert len(run.report["problems"]) == 1  # 29 variables, one finding
    problem, disconnected = _disconnected(run)
    assert len(disconnected["variables"]) == 29
    assert disconnected["all"] is True
    assert disconnected["break"]["op"] == "ArgMax"
    assert disconnected["break"]["file"] == script
    assert disconnected["break"]["line"] == line_of(
        script, "generated_text = tf.argmax(gen_logits, axis=-1)"
    )
    families = [f["family"] for f in problem["fixes"]]
    assert {"soft_embedding", "gumbel_softmax", "reinforce"} <= set(families)
    remedies = [n["remedy"] for n in problem["not_fixes"]]
    assert {"tape_watch", "persistent_tape", "use_model_fit"} <= set(remedies)
    # The doctor spoke first: Keras's own error never came (the explanation quotes it).
    assert "ValueError: No gradients provided" not in run.stderr


def test_cast_to_integer_in_a_custom_layer_breaks_the_layers_before_it(doctor_run):
    script = "examples/disconnected_cast.py"
    problem, disconnected = _disconnected(doctor_run(script))
    assert len(disconnected["variables"]) == 4
    assert disconnected["all"] is False
    assert disconnected["break"]["op"] == "Cast"
    assert disconnected["break"]["line"] == line_of(script, "steps = tf.cast(h * 8.0, tf.int32)")
    assert "remove_cast" in [f["family"] for f in problem["fixes"]]


def test_numpy_round_trip_is_found_at_the_numpy_line(doctor_run):
    script = "examples/disconnected_numpy_roundtrip.py"
    problem, disconnected = _disconnected(doctor_run(script))
    assert len(disconnected["variables"]) == 6
    assert disconnected["all"] is True
    assert disconnected["break"]["line"] == line_of(
        script, "probs = np.clip(pred.numpy(), EPS, 1.0 - EPS)"
    )
    assert "stay_in_tensorflow" in [f["family"] for f in problem["fixes"]]
    # The first step had no gradient (unwatched, Keras raises there): the finding is of
    # it, though where the path breaks was recorded as the step ran once more.
    assert problem["step"] == 0
    assert "the doctor skipped the update instead" in problem["explanation"]


def test_loss_computed_after_the_tape_block_is_outside_the_tape(doctor_run):
    script = "examples/loss_outside_tape.py"
    problem, disconnected = _disconnected(doctor_run(script))
    assert len(disconnected["variables"]) == 4
    assert disconnected["all"] is True
    assert disconnected["break"]["line"] == line_of(
        script, "loss = tf.reduce_mean(tf.square(forecast - target))"
    )
    assert "compute_inside_tape" in [f["family"] for f in problem["fixes"]]


def test_layer_never_called_in_fit_is_the_partial_case(doctor_run):
    run = doctor_run("examples/unused_layer_fit.py")
    problem, disconnected = _disconnected(run)
    assert disconnected["variables"] == [
        "churn_model/tenure_head/kernel",
        "churn_model/tenure_head/bias",
    ]
    assert disconnected["all"] is False
    assert disconnected["break"] is None
    assert "exclude_unused_variables" in [f["family"] for f in problem["fixes"]]
    assert run.report["steps_watched"] > 1  # training went on, as Keras would


@pytest.mark.parametrize(
    "script",
    ["examples/healthy_dqn_target_network.py", "examples/healthy_gan_discriminator.py"],
)
def test_variables_never_handed_to_the_optimizer_are_not_flagged(doctor_run, script):
    run = doctor_run(script)
    assert run.exit_code == 0, run.stderr[-3000:]
    assert run.report["status"] == "healthy"


def test_gradient_exactly_zero_for_a_window_is_reported_once(doctor_run):
    run = doctor_run("tests/scripts/sign_zero_gradient_fit.py")
    assert run.exit_code == 1
    assert len(run.report["problems"]) == 1
    problem, disconnected = _disconnected(run)
    assert disconnected["variables"] == ["sequential/dense/kernel", "sequential/dense/bias"]
    assert disconnected["all"] is False
    assert "exactly zero" in problem["explanation"]
    assert run.report["steps_watched"] == 128  # training is not stopped


def test_eager_loop_in_the_script_body_is_traced_on_its_next_step_once(doctor_run):
    run = doctor_run("tests/scripts/eager_loop_unused_layer.py")
    assert run.exit_code == 1
    assert run.report["steps_watched"] == 6  # the partial case does not stop training
    (problem,) = run.report["problems"]
    assert problem["disconnected"]["variables"] == ["dense_2/kernel", "dense_2/bias"]
    assert problem["disconnected"]["all"] is False


def test_variables_a_tape_was_told_not_to_watch_are_named_and_watching_is_the_fix(doctor_run):
    # `watch_accessed_variables=False` and a `tape.watch` of half the variables: the
    # path is not broken, the tape never recorded it; watching them is the fix, not a
    # remedy that "will not help".
    script = "tests/scripts/unwatched_tape_head.py"
    problem, disconnected = _disconnected(doctor_run(script))
    assert sorted(disconnected["variables"]) == ["out_b", "out_w"]
    assert (disconnected["all"], disconnected["break"], problem["step"]) == (False, None, 0)
    assert "The tape was made with `watch_accessed_variables=False`" in problem["explanation"]
    call = f"{script}:{line_of(script, 'gradients = tape.gradient(loss, variables)')}"
    assert (
        f"(your line {call} `gradients = tape.gradient(loss, variables)`)"
        in (problem["explanation"])
    )
    assert [f["family"] for f in problem["fixes"]] == ["tape_watch"]
    remedies = {n["remedy"] for n in problem["not_fixes"]}
    assert remedies.isdisjoint({"tape_watch", "watch_accessed_variables", "use_model_fit"})


def test_none_gradients_the_loop_filters_out_are_still_found_at_the_argmax(doctor_run):
    # `if g is not None` hands the optimizer only the experts' gradients: Keras never
    # warns, and the router, behind an argmax, silently never trains.
    script = "tests/scripts/filtered_none_gradients_router.py"
    run = doctor_run(script)
    problem, disconnected = _disconnected(run)
    assert disconnected["variables"] == ["router/kernel", "router/bias"]
    assert disconnected["all"] is False
    assert disconnected["break"]["op"] == "ArgMax"
    assert disconnected["break"]["line"] == line_of(script, "route = tf.argmax(router(batch)")
    assert run.report["steps_watched"] == 8  # the rest trains on, as the script wants


def test_a_discriminator_frozen_before_its_own_first_step_is_named_with_the_line_that_trains_it(
    doctor_run,
):
    script = "tests/scripts/frozen_discriminator_train_on_batch.py"
    run = doctor_run(script)
    assert "discriminator weights moved: 0.0" in run.stdout  # Keras 3 trained nothing
    problem, disconnected = _disconnected(run)
    assert len(disconnected["variables"]) == 4
    assert all(name.startswith("critic/") for name in disconnected["variables"])
    line = line_of(script, "discriminator.train_on_batch(batch, labels)")
    assert f"Model `critic` is trained by your line {script}:{line}" in problem["explanation"]
    assert "none of its 4 weights is trainable" in problem["explanation"]
    (fix,) = problem["fixes"]
    assert fix["family"] == "unfreeze_model"
    assert fix["code"].startswith("discriminator.trainable = True")
    assert run.report["steps_watched"] == 12  # the combined model trains on


def test_none_gradients_filled_in_with_zeros_are_found_at_the_numpy_line(doctor_run):
    # The update gets zeros, not None: nothing warns, but the tape gave None.
    script = "tests/scripts/zero_filled_numpy_roundtrip.py"
    problem, disconnected = _disconnected(doctor_run(script))
    assert problem["step"] == 0
    assert len(disconnected["variables"]) == 4
    assert disconnected["break"]["line"] == line_of(
        script, "predictions = np.clip(model(x[index]).numpy(), -10, 10)"
    )
    assert "your code put tensors of its own in their place" in problem["explanation"]
    assert "stay_in_tensorflow" in [f["family"] for f in problem["fixes"]]
