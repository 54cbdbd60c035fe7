"""Patches of the optimizer's line: the user's own argument, in the user's own terms."""

from gradient_doctor.core.findings import SourceLine
from gradient_doctor.core.knowledge.rewrites.optimizer import (
    OptimizerSite,
    built_learning_rate,
    lower_learning_rate,
    set_clipping,
)
from gradient_doctor.core.patches import apply_edits

SCRIPT = """import argparse
import tensorflow as tf

args = argparse.Namespace(lr=0.05)
opt = tf.keras.optimizers.SGD(args.lr, momentum=0.9)
adam = tf.keras.optimizers.Adam(learning_rate=0.003)  # tuned
plain = tf.keras.optimizers.RMSprop()
schedule = tf.keras.optimizers.schedules.PiecewiseConstantDecay([100, 200], [0.1, 0.01, 0.001])
scheduled = tf.keras.optimizers.SGD(learning_rate=schedule)
model.compile(optimizer="adam", loss="mse")
warmup = WarmUp(peak_lr=20.0, warmup_steps=60, min_rate=0.5)
warmed = tf.keras.optimizers.SGD(learning_rate=warmup, momentum=0.9)
cycle = OneCycle(3e-3, 100)
cycled = tf.keras.optimizers.SGD(learning_rate=cycle)
cosine = WarmupCosine(peak=3e-3 * 256, warmup_steps=60, total_steps=900)
warm_cosine = tf.keras.optimizers.SGD(learning_rate=cosine, momentum=0.9)
""".splitlines(keepends=True)


def _site(text: str, cls: str, rate: float | None = None, schedule: bool = False):
    line = next(n for n, code in enumerate(SCRIPT, 1) if text in code)
    return OptimizerSite(
        SourceLine("train.py", line, SCRIPT[line - 1].strip()), cls, rate, schedule
    )


def _patched(edits) -> list[str]:
    return [line.rstrip("\n") for line in apply_edits(SCRIPT, edits)]


def test_an_argument_expression_is_scaled_as_written_and_the_trial_uses_the_same_number():
    edits, setting = lower_learning_rate(_site("args.lr, momentum", "SGD", 0.05), SCRIPT)
    assert "opt = tf.keras.optimizers.SGD(args.lr * 0.1, momentum=0.9)" in _patched(edits)
    assert (setting.name, setting.value) == ("learning_rate", 0.05 * 0.1)


def test_a_literal_is_divided_and_the_comment_stays():
    edits, setting = lower_learning_rate(_site("Adam(learning_rate", "Adam", 0.003), SCRIPT)
    assert "adam = tf.keras.optimizers.Adam(learning_rate=0.0003)  # tuned" in _patched(edits)
    assert setting.value == 0.0003


def test_a_literal_a_callback_moved_is_divided_as_written_not_replaced_by_the_rate_in_use():
    # A LearningRateScheduler tripled 0.003 up to 16.4: writing a tenth of the rate in use
    # where 0.003 is built would raise the rate 547x.
    site = _site("Adam(learning_rate", "Adam", 16.4)
    edits, setting = lower_learning_rate(site, SCRIPT)
    assert "adam = tf.keras.optimizers.Adam(learning_rate=0.0003)  # tuned" in _patched(edits)
    assert setting.value == 1.64  # the trial, at the failing step, runs at a tenth of it
    assert built_learning_rate(site, SCRIPT) == 0.003


def test_a_default_rate_is_written_out():
    edits, setting = lower_learning_rate(_site("RMSprop()", "RMSprop", 0.001), SCRIPT)
    assert "plain = tf.keras.optimizers.RMSprop(learning_rate=0.0001)" in _patched(edits)


def test_a_schedule_has_its_rates_scaled_where_it_is_built():
    edits, setting = lower_learning_rate(
        _site("learning_rate=schedule", "SGD", schedule=True), SCRIPT
    )
    assert (setting.name, setting.value) == ("learning_rate_scale", 0.1)
    assert (
        "schedule = tf.keras.optimizers.schedules.PiecewiseConstantDecay("
        "[100, 200], [0.01, 0.001, 0.0001])"
    ) in _patched(edits)


def test_the_users_own_schedule_has_the_keywords_that_name_a_rate_scaled():
    edits, setting = lower_learning_rate(
        _site("learning_rate=warmup", "SGD", schedule=True), SCRIPT
    )
    assert (setting.name, setting.value) == ("learning_rate_scale", 0.1)
    assert "warmup = WarmUp(peak_lr=2.0, warmup_steps=60, min_rate=0.05)" in _patched(edits)
    # A rate passed by position to the user's class is not known to be one: no patch.
    assert lower_learning_rate(_site("learning_rate=cycle", "SGD", schedule=True), SCRIPT) is None


def test_a_warmups_peak_written_as_arithmetic_is_scaled_as_written():
    edits, setting = lower_learning_rate(
        _site("learning_rate=cosine", "SGD", schedule=True), SCRIPT
    )
    assert (setting.name, setting.value) == ("learning_rate_scale", 0.1)
    assert (
        "cosine = WarmupCosine(peak=(3e-3 * 256) * 0.1, warmup_steps=60, total_steps=900)"
        in _patched(edits)
    )


def test_a_named_optimizer_is_written_out_with_the_lower_rate():
    edits, setting = lower_learning_rate(_site('optimizer="adam"', "Adam", 0.001), SCRIPT)
    assert (
        'model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate=0.0001), loss="mse")'
        in _patched(edits)
    )


def test_clipping_is_added_with_the_value_the_trial_uses():
    edits, setting = set_clipping(
        _site("args.lr, momentum", "SGD", 0.05), SCRIPT, "global_clipnorm", 16.2345
    )
    line = "opt = tf.keras.optimizers.SGD(args.lr, momentum=0.9, global_clipnorm=16.23)"
    assert line in _patched(edits)
    assert (setting.name, setting.value) == ("global_clipnorm", 16.23)


def test_an_optimizer_the_line_does_not_build_gets_no_patch():
    assert lower_learning_rate(_site("args = argparse", "SGD", 0.05), SCRIPT) is None
    assert lower_learning_rate(_site("learning_rate=schedule", "SGD"), SCRIPT) is None


def test_loss_scaling_wraps_the_users_own_optimizer_call():
    from gradient_doctor.core.knowledge.rewrites.optimizer import wrap_loss_scaling

    edit = wrap_loss_scaling(_site("Adam(learning_rate", "Adam", 0.003), SCRIPT)
    assert (
        "adam = tf.keras.optimizers.LossScaleOptimizer("
        "tf.keras.optimizers.Adam(learning_rate=0.003))  # tuned"
    ) in _patched((edit,))


def test_a_rate_a_scheduler_callback_sets_gets_no_patch_of_the_optimizer(tmp_path):
    # A LearningRateScheduler passed to fit sets the rate at each epoch's start: the
    # optimizer's own rate, patched, would be overwritten there.
    from gradient_doctor.core.findings import Finding, Fix, Origin
    from gradient_doctor.core.fix_placement import FixSites, place_fixes

    (tmp_path / "train.py").write_text("".join(SCRIPT))
    lower = Fix("lower_learning_rate", "Lower the learning rate 10x", "lr / 10")
    origin = Origin("Exp", "Exp", None, SourceLine("train.py", 4, "opt = ..."), None, (), ())
    finding = Finding("forward_overflow", 3, "forward", origin, "x", fixes=(lower,))
    site = _site("args.lr, momentum", "SGD", 0.05)
    sites = FixSites(optimizer=site, rate_set_by="the `LearningRateScheduler` callback")
    (placed,) = place_fixes(finding, str(tmp_path), sites).fixes
    assert placed.patch is None and placed.edits == ()
    assert placed.title.startswith("Lower the learning rates that the `LearningRateScheduler`")
    assert "schedule(epoch, lr) / 10" in placed.code
    # Without the callback, the optimizer's line is patched.
    (patched,) = place_fixes(finding, str(tmp_path), FixSites(optimizer=site)).fixes
    assert patched.patch is not None
