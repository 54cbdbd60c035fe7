"""Headroom warnings: a risky op's input approaching its limit, forecast before it gets there."""

import math

import pytest

from gradient_doctor.core.detectors import HeadroomDetector

from .conftest import EXP_LIMIT


def _story1(step, rng):
    """Story 1's largest softmax score: ~2 -> ~83 over 800 steps, ~83.5 until 1150, then over."""
    if step < 800:
        base = 2.0 + 81.0 * step / 800
    elif step < 1150:
        base = 83.5
    else:
        base = 83.5 + (step - 1150) * 0.22
    return base + rng.gauss(0.0, 0.4)


def _first_warning(history):
    return next(index for index, findings in enumerate(history) if findings)


def test_story1_warns_hundreds_of_steps_before_the_overflow(headroom_record, run, rng):
    values = [_story1(step, rng) for step in range(1200)]
    crossing = next(step for step, value in enumerate(values) if value > EXP_LIMIT)
    assert 1170 <= crossing <= 1180
    history = run(HeadroomDetector(), [headroom_record(s, v) for s, v in enumerate(values)])
    first = _first_warning(history)
    assert first <= crossing - 400
    warning = history[first][0]
    assert crossing / 2 <= warning.forecast_step <= crossing * 2
    # On the plateau the trend is flat, yet the warning stays, with a forecast.
    on_plateau = history[1100][0]
    assert on_plateau.step == first
    assert "no clear trend" in on_plateau.explanation
    assert crossing / 2 <= on_plateau.forecast_step <= crossing * 2
    assert on_plateau.headroom.limit == EXP_LIMIT
    assert on_plateau.headroom.value == pytest.approx(values[1100])


def test_story1_warning_says_what_where_and_when(headroom_record, run, rng):
    history = run(
        HeadroomDetector(),
        [headroom_record(step, _story1(step, rng)) for step in range(600)],
    )
    warning = history[-1][0]
    assert warning.category == "forward_overflow"
    assert warning.phase == "forward"
    assert warning.origin.op == "Exp"
    assert warning.origin.op_name == "message_passing/Exp"
    assert warning.origin.layer == "message_passing"
    assert (warning.origin.source.file, warning.origin.source.line) == ("train.py", 42)
    assert warning.explanation.startswith(
        "Exp in layer `message_passing` (train.py:42): largest input "
    )
    assert "and growing ~10 per 100 steps; float32 overflow expected near step " in (
        warning.explanation
    )
    assert f"near step {warning.forecast_step}." in warning.explanation


def test_remedies_come_from_the_knowledge_base(headroom_record, run, rng):
    history = run(
        HeadroomDetector(),
        [headroom_record(step, _story1(step, rng)) for step in range(600)],
    )
    warning = history[-1][0]
    families = [fix.family for fix in warning.fixes]
    assert families[:3] == ["stable_softmax", "constrain_weights", "normalize_input"]
    assert "tf.reduce_max(scores" in warning.fixes[0].code
    assert [item.remedy for item in warning.not_fixes] == [
        "gradient_clipping",
        "lower_learning_rate",
        "larger_batch",
    ]


def test_steady_rise_is_forecast_within_a_factor_of_two_500_steps_ahead(headroom_record, run, rng):
    def rise(step):
        return 10.0 + (EXP_LIMIT - 10.0) * step / 2400 + rng.gauss(0.0, 0.5)

    history = run(HeadroomDetector(), [headroom_record(step, rise(step)) for step in range(1901)])
    assert _first_warning(history) <= 1900
    assert 1200 <= history[1900][0].forecast_step <= 4800
    assert history[1900][0].forecast_step == pytest.approx(2400, rel=0.2)


def test_softmax_internals_far_below_the_limit_are_quiet(headroom_record, run, rng):
    # tf.nn.softmax subtracts the max: its exp sees values <= 0 however large the logits.
    records = [
        headroom_record(step, -abs(rng.gauss(0.0, 1e-3)), op="Exp", layer="softmax")
        for step in range(2000)
    ]
    assert run(HeadroomDetector(), records)[-1] == []


def test_noisy_but_stable_input_is_quiet(headroom_record, run, rng):
    records = [headroom_record(step, 20.0 + rng.gauss(0.0, 3.0)) for step in range(3000)]
    assert run(HeadroomDetector(), records)[-1] == []


def test_slow_rise_far_from_the_limit_is_quiet(headroom_record, run, rng):
    # +1 per 1000 steps from 5: the limit is ~84000 steps away, far beyond what was seen.
    records = [
        headroom_record(step, 5.0 + step / 1000 + rng.gauss(0.0, 0.05)) for step in range(3000)
    ]
    assert run(HeadroomDetector(), records)[-1] == []


def test_the_doctors_own_clip_bound_is_not_flagged(headroom_record, run):
    # tf.minimum(x, 79.0), the clip fix for float32 exp, pins the input at 79.
    records = [
        headroom_record(step, 79.0, code="w = tf.exp(tf.minimum(s, 79.0))") for step in range(300)
    ]
    assert run(HeadroomDetector(), records)[-1] == []


def test_one_warning_per_op_updated_not_repeated(headroom_record, run, rng):
    history = run(
        HeadroomDetector(),
        [headroom_record(step, _story1(step, rng)) for step in range(1150)],
    )
    first = _first_warning(history)
    assert all(len(findings) == 1 for findings in history[first:])
    assert {findings[0].step for findings in history[first:]} == {first}
    assert len({findings[0].explanation for findings in history[first:]}) > 100


def test_two_ops_get_two_warnings(headroom_record, rng):
    detector = HeadroomDetector()
    for step in range(400):
        for layer in ("a", "b"):
            detector.observe(headroom_record(step, 85.0 + rng.gauss(0.0, 0.2), layer=layer))
    assert [finding.origin.layer for finding in detector.findings()] == ["a", "b"]


def test_near_limit_warns_at_once(headroom_record):
    detector = HeadroomDetector()
    detector.observe(headroom_record(0, 85.0))
    (warning,) = detector.findings()
    assert warning.step == 0 and warning.forecast_step is None
    assert "only 3.7 (4.2%) from the float32 Exp overflow threshold 88.72" in warning.explanation


def test_log_input_falling_to_zero(headroom_record, run, rng):
    def smallest(step):
        return max(0.5 - step / 1000 + rng.gauss(0.0, 0.002), 1e-6)

    records = [
        headroom_record(
            step, smallest(step), kind="min_input", limit=0.0, op="Log", code="y = tf.math.log(p)"
        )
        for step in range(300)
    ]
    warning = run(HeadroomDetector(), records)[-1][0]
    assert warning.category == "forward_domain"
    assert warning.forecast_step == pytest.approx(500, rel=0.1)
    assert "smallest input" in warning.explanation and "falling ~0.1 per 100 steps" in (
        warning.explanation
    )
    assert "Log leaving its domain expected near step" in warning.explanation
    assert warning.fixes[0].family == "safe_log"


def test_denominator_near_zero_within_its_noise(headroom_record, run, rng):
    records = [
        headroom_record(
            step,
            abs(rng.gauss(0.0, 1e-3)),
            kind="min_abs_denominator",
            limit=0.0,
            op="RealDiv",
            code="y = x / d",
        )
        for step in range(100)
    ]
    warning = run(HeadroomDetector(), records)[-1][0]
    assert warning.category == "forward_domain"
    assert "smallest |denominator|" in warning.explanation
    assert "from zero, with no clear trend" in warning.explanation
    assert "safe_div" in [fix.family for fix in warning.fixes]


def test_clipped_acos_input_is_quiet(headroom_record, run):
    records = [
        headroom_record(
            step, 1.0 - 1e-7, kind="abs_input", limit=1.0, op="Acos", code="a = tf.acos(c)"
        )
        for step in range(300)
    ]
    assert run(HeadroomDetector(), records)[-1] == []


def test_float16_cast_nearing_65504(headroom_record, run):
    records = [
        headroom_record(
            step,
            20000.0 + 100.0 * step,
            kind="max_abs_value",
            limit=65504.0,
            op="Cast",
            dtype="float16",
            code="h = tf.cast(x, tf.float16)",
        )
        for step in range(400)
    ]
    warning = run(HeadroomDetector(), records)[-1][0]
    assert warning.category == "forward_overflow"
    assert "largest |value|" in warning.explanation
    assert "float16 overflow expected near step 456" in warning.explanation
    assert warning.fixes[0].family == "float32_island"


def test_a_value_past_the_limit_says_so(headroom_record, run, rng):
    records = [headroom_record(step, 40.0 + step / 10 + rng.gauss(0.0, 0.1)) for step in range(500)]
    (warning,) = run(HeadroomDetector(), records)[-1]
    assert warning.forecast_step == 499
    assert warning.explanation.startswith("Exp in layer `message_passing` (train.py:42): largest")
    assert warning.explanation.endswith(" reached the float32 Exp overflow threshold 88.72.")


def test_non_finite_samples_are_skipped(headroom_record):
    detector = HeadroomDetector()
    detector.observe(headroom_record(0, math.inf))
    detector.observe(headroom_record(1, math.nan))
    assert detector.findings() == []


def test_sample_without_a_source_line(headroom_record):
    detector = HeadroomDetector()
    detector.observe(headroom_record(0, 88.0, code=None, layer=None))
    (warning,) = detector.findings()
    assert warning.origin.source is None
    assert warning.explanation.startswith("Exp: largest input 88")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window": 1}, r"^`window` must be an int of at least 3. Received: window=1$"),
        ({"min_points": 200}, r"`min_points` must be at most `window` \(100\)"),
        ({"horizon_factor": 0}, r"`horizon_factor` must be a float > 0. Received"),
        ({"near_fraction": 1.5}, r"`near_fraction` must be a float in \[0, 1\). Received"),
        ({"noise_multiple": -1}, r"`noise_multiple` must be a float >= 0"),
    ],
)
def test_arguments_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HeadroomDetector(**kwargs)
