"""Where fix trials start: the last good state, or a saved state from before the trouble."""

from gradient_doctor.core.evidence import StepHistory
from gradient_doctor.core.findings import Finding
from gradient_doctor.core.trial_start import trial_start, trouble_began


def _finding(step=120):
    return Finding("exploding_gradients", step, None, None, "x")


def _history(norms):
    steps = tuple(range(len(norms)))
    return StepHistory(steps, tuple(1.0 for _ in norms), tuple(norms))


def test_the_trouble_begins_where_the_norm_rose_for_good():
    norms = [1.0, 1.1, 0.9, 1.0, 1.05, 0.95, 1.0, 1.0, 4.0, 9.0, 30.0, 100.0]
    assert trouble_began(_history(norms), 12, None) == 8


def test_a_norm_that_dips_back_marks_no_start_and_an_earlier_warning_counts():
    norms = [1.0, 1.0, 1.0, 1.0, 5.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert trouble_began(_history(norms), 10, None) == 10
    assert trouble_began(_history(norms), 10, first_warning=3) == 3


def test_each_kind_of_remedy_starts_from_the_state_it_needs():
    saved = [0, 50, 100, 120]  # 120: the last good state, just before the failing step
    finding = _finding(120)
    assert trial_start("safe_log", finding, 90, saved).step == 120
    lower = trial_start("lower_learning_rate", finding, 90, saved)
    assert lower.step == 50 and "began at step 90" in lower.reason
    assert trial_start("better_init", finding, 90, saved).step == 0
    # No sign of where it began: the update remedies still start before the failing step.
    assert trial_start("gradient_clipping", finding, 120, saved).step == 100


def test_a_start_only_remedy_is_not_tried_when_the_run_failed_too_far_from_the_start():
    assert trial_start("normalize_input", _finding(90_000), 10, [0, 89_950, 90_000]) is None


def test_the_loss_before_the_trouble_falls_back_to_the_steps_before_the_failing_one():
    from gradient_doctor.core.evidence import StepHistory
    from gradient_doctor.core.pipeline.trials import _loss_before

    # The history keeps steps 1800-1809 only; the trouble was warned of at step 1500.
    history = StepHistory(
        steps=tuple(range(1800, 1810)), losses=(-1.3,) * 2 + (-1.2,) * 7 + (None,)
    )
    assert _loss_before(history, began=1802, failing=1809) == -1.3  # before the trouble
    assert _loss_before(history, began=1500, failing=1809) == -1.2  # before the failing step
    assert _loss_before(StepHistory(), began=0, failing=0) is None  # a failure at step 0


def test_clipping_takes_the_median_healthy_norm_only_when_there_are_enough_of_them():
    # A recurrent net whose first update already exploded (norm 478224): the median of
    # that one step clipped nothing, and clipping was refuted by a trial that never clipped.
    from gradient_doctor.core.evidence import StepHistory
    from gradient_doctor.core.fix_placement import clipping_threshold

    exploded = StepHistory(steps=(0,), grad_norms=(478224.0,))
    assert clipping_threshold(exploded) == 1.0
    healthy = StepHistory(steps=tuple(range(5)), grad_norms=(3.0, 1.0, 2.0, 5.0, 4.0))
    assert clipping_threshold(healthy) == 3.0
    assert clipping_threshold(None) == 1.0


def test_norms_astronomical_from_the_first_step_give_no_median_to_clip_at():
    # A VAE whose log-variance overflowed from step 0 had norms near 1e35 throughout:
    # `clip_grad_norm_(..., max_norm=2.482e+38)` clips nothing.
    from gradient_doctor.core.evidence import StepHistory
    from gradient_doctor.core.fix_placement import clipping_threshold

    astronomical = StepHistory(steps=tuple(range(6)), grad_norms=(5.3e35,) * 3 + (2.5e38,) * 3)
    assert clipping_threshold(astronomical) == 1.0
