"""Judging fix trials: verified only when the unchanged step fails again and the fix holds."""

import dataclasses

from gradient_doctor.core.findings import Finding, Fix, NotFix
from gradient_doctor.core.fix_trials import TrialOutcome, describe, judge, ranked

_PATCH = "--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-w = tf.exp(s)\n+w = tf.exp(s - m)\n"


def _finding(phase="forward"):
    return Finding(
        category="forward_overflow",
        step=41,
        phase=phase,
        origin=None,
        explanation="x",
        not_fixes=(NotFix("gradient_clipping", "clipping acts on gradients"),),
        fixes=(
            Fix("stable_softmax", "shift", "code", patch=_PATCH),
            Fix("normalize_input", "norm", "code"),
        ),
    )


def _outcome(remedy, failed_at=None, losses=(1.0, 0.9, 0.8, 0.7), steps=4, **kwargs):
    run = steps if failed_at is None else failed_at + 1
    return TrialOutcome(remedy, "setting", steps, run, failed_at, tuple(losses), **kwargs)


def _fix(finding, family):
    return next(fix for fix in finding.fixes if fix.family == family)


FAILED_BASELINE = TrialOutcome(None, "", 4, 1, 0)


def test_a_fix_that_holds_where_the_unchanged_step_fails_is_verified():
    judged = judge(_finding(), FAILED_BASELINE, [_outcome("stable_softmax")])
    fix = _fix(judged, "stable_softmax")
    assert fix.verified is True
    assert "before step 41" in fix.evidence
    assert "all 4 steps finite" in fix.evidence
    assert "loss 1 -> 0.7 (falling)" in fix.evidence
    assert "failed again at trial step 1" in fix.evidence


def test_a_remedy_that_held_but_has_no_patch_is_not_marked_verified():
    judged = judge(_finding(), FAILED_BASELINE, [_outcome("normalize_input")])
    fix = _fix(judged, "normalize_input")
    assert fix.verified is None
    assert "no patch of your file could be written" in fix.evidence


def test_untried_fixes_say_why_and_not_fixes_are_left_as_they_were():
    judged = judge(_finding(), FAILED_BASELINE, [_outcome("stable_softmax")])
    untried = _fix(judged, "normalize_input")  # advice code, no patch: nothing to run
    assert (untried.verified, untried.code) == (None, "code")
    assert untried.evidence.startswith("not tried: no patch of your files to run")
    assert judged.not_fixes[0].evidence is None


def test_a_fix_that_fails_again_is_not_verified():
    judged = judge(_finding(), FAILED_BASELINE, [_outcome("stable_softmax", failed_at=2)])
    assert _fix(judged, "stable_softmax").verified is False
    assert "not finite again at trial step 3 of 4" in _fix(judged, "stable_softmax").evidence


def test_when_the_unchanged_step_also_holds_the_trial_cannot_tell():
    held_baseline = _outcome(None)
    judged = judge(_finding(), held_baseline, [_outcome("stable_softmax")])
    assert _fix(judged, "stable_softmax").verified is None
    assert "cannot tell" in _fix(judged, "stable_softmax").evidence


def test_an_unchanged_step_that_stayed_finite_but_diverged_failed_again():
    # A GRU at a too-high rate: the unchanged trial stayed finite for 293 steps, its loss
    # rising from 2.4e6 to 3.4e11 on its way to the overflow. It failed; a lower rate that
    # held, learning, is verified (before: "this trial cannot tell").
    diverging = _outcome(None, losses=(2.4e6, 3e7, 5e9, 3.4e11))
    judged = judge(_finding(), diverging, [_outcome("stable_softmax")])
    fix = _fix(judged, "stable_softmax")
    assert fix.verified is True, fix.evidence
    assert "unchanged, it stayed finite for 4 steps but its loss diverged" in fix.evidence


def test_a_fix_whose_loss_blows_up_is_not_verified_even_if_finite():
    rising = _outcome("stable_softmax", losses=(1.0, 2.0, 5.0, 40.0))
    judged = judge(_finding(), FAILED_BASELINE, [rising])
    assert _fix(judged, "stable_softmax").verified is False
    assert "loss diverged" in _fix(judged, "stable_softmax").evidence


def test_a_remedy_that_could_not_be_put_in_place_says_why():
    skipped = TrialOutcome("stable_softmax", "", 4, 0, None, skipped="no axis known")
    judged = judge(_finding(), FAILED_BASELINE, [skipped])
    assert _fix(judged, "stable_softmax").verified is None
    assert _fix(judged, "stable_softmax").evidence == "not tried: no axis known"


def test_a_tried_not_fix_carries_its_evidence_and_why_its_first_step_failed():
    judged = judge(_finding(), FAILED_BASELINE, [_outcome("gradient_clipping", failed_at=0)])
    evidence = judged.not_fixes[0].evidence
    assert "not finite again at trial step 1 of 4" in evidence
    assert "forward pass ran on the saved weights" in evidence


def test_the_first_step_note_is_only_for_forward_problems():
    outcome = _outcome("gradient_clipping", failed_at=0)
    assert "saved weights" not in describe(outcome, 41, phase="backward")


def test_negative_and_wandering_losses_still_count_as_learning():
    # With a loss from before the trouble to compare with, a loss may wander.
    assert _outcome("x", losses=(-1.25, -1.3, -1.2, -1.2)).learning(reference=-1.2)
    assert _outcome("x", losses=(0.3, 0.5, 0.4, 0.47)).learning(reference=0.4)
    assert not _outcome("x", losses=(-1.0, 0.5, 1.0, 2.0)).learning(reference=-1.0)


def test_a_likelihood_that_passes_zero_by_its_own_size_is_not_a_runaway():
    # A learned noise variance shrinking on clean data: the likelihood starts at 0.42,
    # is near zero where the failing batch's repeats begin, and falls on to -1.2 (its
    # clean-data optimum is near -6). Sized from the trial's start, that is no runaway.
    before = [0.42 - 0.0066 * i for i in range(54)]
    tail = [0.12 - 0.005 * i for i in range(20)] + [0.02 - 0.0067 * i for i in range(180)]
    outcome = _outcome("x", losses=before + tail, steps=254, repeated_from=54)
    assert outcome.shortfall(reference=0.12) is None
    # Sized from the tail's first tenth alone (0.12 to 0.025), it would be one.
    alone = _outcome("x", losses=tail, steps=200)
    assert "fell below zero without bound" in alone.shortfall(reference=0.12)
    # A cross-entropy that runs away to -18675 still does not hold.
    runaway = [4.2, 4.0, 3.1, 1.0, -7.0, -300.0, *[-4315.0 - 1000 * i for i in range(14)]]
    held_then_ran = _outcome("x", losses=[4.3] * 20 + runaway, steps=40, repeated_from=20)
    assert "fell below zero without bound" in held_then_ran.shortfall(reference=4.3)


def test_a_trial_whose_patch_took_a_loss_of_nine_below_zero_at_once_is_a_runaway():
    # A clamp of NT-Xent's exp: the run was at 9.3 before the trouble; the trial's first
    # step is already -1.3e7, and it ends at -7e19 while "falling".
    losses = [-1.32e7 * 10 ** (i / 16) for i in range(200)]
    outcome = _outcome("x", losses=losses, steps=200)
    assert "fell below zero without bound" in outcome.shortfall(reference=9.3)
    # A likelihood a little below zero from the first step, sized by its own moves, learns.
    nll = [-0.5 - 0.0125 * i for i in range(200)]
    assert _outcome("x", losses=nll, steps=200).shortfall(reference=0.9) is None


def test_loss_trend_uses_the_first_and_last_tenth():
    outcome = _outcome("x", losses=[float(v) for v in range(100)], steps=100)
    assert outcome.loss_trend() == (4.5, 94.5)
    assert not outcome.learning()


def test_a_not_fix_whose_trial_helps_becomes_a_fix_with_its_verdict():
    lower = Fix("lower_learning_rate", "Lower the learning rate", "lr", patch=_PATCH)
    finding = dataclasses.replace(
        _finding(),
        not_fixes=(NotFix("lower_learning_rate", "only delays it", structural=False, fix=lower),),
    )
    judged = judge(finding, FAILED_BASELINE, [_outcome("lower_learning_rate")])
    assert judged.not_fixes == ()
    promoted = _fix(judged, "lower_learning_rate")
    assert (promoted.family, promoted.verified) == ("lower_learning_rate", True)


def test_an_expectation_nobody_tried_says_so():
    guess = NotFix("larger_batch", "it is expected to delay it", structural=False)
    fact = NotFix("gradient_clipping", "clipping acts on gradients")
    finding = dataclasses.replace(_finding(), not_fixes=(guess, fact))
    judged = judge(finding, FAILED_BASELINE, [_outcome("stable_softmax")])
    assert judged.not_fixes[0].evidence == "not tried"
    assert judged.not_fixes[0].untried_expectation is False  # it now says it was not tried
    assert guess.untried_expectation and not fact.untried_expectation
    assert judged.not_fixes[1].evidence is None


def test_verified_fixes_come_first_then_the_untried_then_the_failed():
    finding = dataclasses.replace(
        _finding(),
        fixes=(
            Fix("safe_log", "a", "x", patch=_PATCH),
            Fix("stable_softmax", "b", "x", patch=_PATCH),
            Fix("normalize_input", "c", "x"),
        ),
    )
    outcomes = [_outcome("safe_log", failed_at=1), _outcome("stable_softmax")]
    judged = judge(finding, FAILED_BASELINE, outcomes)
    assert [(f.family, f.verified) for f in judged.fixes] == [
        ("stable_softmax", True),
        ("normalize_input", None),
        ("safe_log", False),
    ]


def test_a_remedy_on_the_updates_that_held_through_a_drift_is_said_to_maybe_only_delay_it():
    lower = Fix("lower_learning_rate", "lower", "lr", patch=_PATCH)
    finding = dataclasses.replace(_finding(), fixes=(lower,))  # forward_overflow at step 41
    early = dataclasses.replace(_outcome("lower_learning_rate"), start=0)
    baseline = dataclasses.replace(FAILED_BASELINE, start=0)
    judged = judge(finding, {0: baseline}, [early])
    assert judged.fixes[0].verified is True
    assert "built up from step 0 to 41: it may only delay" in judged.fixes[0].evidence
    exploding = dataclasses.replace(finding, category="exploding_gradients")
    judged = judge(exploding, {0: baseline}, [early])
    assert "may only delay" not in judged.fixes[0].evidence  # there the rate is the cause


def _judged_fix(outcome, reference=None):
    return _fix(judge(_finding(), FAILED_BASELINE, [outcome], reference), "stable_softmax")


def test_a_fix_whose_gradients_were_all_zero_is_not_verified():
    zeros = _outcome("stable_softmax", grad_norms=(0.0, 0.0, 0.0, 0.0))
    fix = _judged_fix(zeros, reference=1.0)
    assert fix.verified is False
    assert "the gradients were exactly zero at 4 of its 4 steps" in fix.evidence
    moving = _outcome("stable_softmax", grad_norms=(0.0, 0.3, 0.2, 0.1))
    assert _judged_fix(moving, reference=1.0).verified is True


def test_with_no_loss_from_before_the_trouble_the_loss_must_fall():
    flat = _judged_fix(_outcome("stable_softmax", losses=(16.1, 16.1, 16.1, 16.1)))
    assert flat.verified is False
    assert "the loss did not fall over the trial (16.1 -> 16.1)" in flat.evidence
    falling = _judged_fix(_outcome("stable_softmax", grad_norms=(1.0, 1.0, 1.0, 1.0)))
    assert falling.verified is True
    assert "the loss fell by 1% or more and the gradients were not zero, as a trial" in (
        falling.evidence
    )
    # 0.8543 -> 0.8542 over the trial is no learning (a clamp that held dead units dead).
    barely = _judged_fix(_outcome("stable_softmax", losses=(0.8543,) * 20 + (0.8542,) * 20))
    assert barely.verified is False
    assert "the loss barely fell over the trial (0.8543 -> 0.8542, 0.012% lower)" in (
        barely.evidence
    )


def test_several_objectives_are_judged_each_and_none_against_the_loss_before():
    # The generator's loss (the one a single-loss run would report) ends well above the
    # loss before the trouble while the discriminator's falls: they trade off.
    gan = _outcome(
        "stable_softmax",
        losses=(1.4, 1.8, 2.0, 2.2),
        objective_losses=((1.6, 1.2, 1.0, 0.9), (1.4, 1.8, 2.0, 2.2)),
    )
    fix = _judged_fix(gan, reference=0.7)
    assert fix.verified is True, fix.evidence
    assert "the losses of its 2 objectives 1.6 -> 0.9, 1.4 -> 2.2" in fix.evidence
    assert "judged over its 2 objectives: each one's loss finite at every step" in fix.evidence
    assert not dataclasses.replace(gan, objective_losses=()).learning(0.7)  # one loss: worse
    diverging = dataclasses.replace(
        gan, objective_losses=((1.6, 1.2, 1.0, 0.9), (1.4, 2.5, 4.0, 7.1))
    )
    fix = _judged_fix(diverging, reference=0.7)
    assert fix.verified is False
    assert "objective 2's loss (of 2, in the order of the step's updates) diverged" in (
        fix.evidence
    )


def test_a_loss_above_the_one_before_counts_only_where_it_fell_on_the_repeated_failing_batch():
    # A loss scaled up by the failing batch itself cannot match the earlier batches'.
    huge = (2.0, 2.1, 2.0, 2.3e21, 1.9e21, 1.2e21, 9e20, 6e20, 4e20, 3e20)
    repeated = _outcome("stable_softmax", losses=huge, steps=10, repeated_from=3)
    fix = _judged_fix(repeated, reference=2.4)
    assert fix.verified is True, fix.evidence
    assert "on the failing batch repeated, which the earlier batches do not compare with" in (
        fix.evidence
    )
    other_data = _outcome("stable_softmax", losses=huge[3:], steps=7)
    fix = _judged_fix(other_data, reference=2.4)
    assert fix.verified is False
    assert "the loss ended worse than the 2.4 it had before the trouble began" in fix.evidence
    rising = dataclasses.replace(
        repeated, losses=huge[:3] + (3e20, 5e20, 5e20, 6e20, 6e20, 7e20, 8e20)
    )
    assert _judged_fix(rising, reference=2.4).verified is False


def test_a_clamp_of_a_large_share_that_held_is_not_verified_but_says_why():
    clamp = Fix("clip_input_domain", "clamp", "code", patch=_PATCH, clamped_share=0.31)
    finding = dataclasses.replace(_finding(), fixes=(clamp,))
    judged = _fix(
        judge(finding, FAILED_BASELINE, [_outcome("clip_input_domain")]), "clip_input_domain"
    )
    assert judged.verified is None
    assert "all 4 steps finite" in judged.evidence
    assert "its clamp changes 31% of the values at the failing step" in judged.evidence
    failing = judge(finding, FAILED_BASELINE, [_outcome("clip_input_domain", failed_at=1)])
    assert _fix(failing, "clip_input_domain").verified is False


def test_a_not_fix_whose_trial_stayed_finite_says_why_it_still_did_not_help():
    # A lower rate over a GAN: finite, but its loss blew up; the text says so, where it
    # said only "all 4 steps finite" under "Will not help".
    lower = Fix("lower_learning_rate", "lower", "code", patch=_PATCH)
    item = NotFix("lower_learning_rate", "only delays it", structural=False, fix=lower)
    finding = dataclasses.replace(_finding(), not_fixes=(item,))
    blew_up = _outcome("lower_learning_rate", losses=(1.0, 5.0, 50.0, 500.0))
    (judged,) = judge(finding, FAILED_BASELINE, [blew_up]).not_fixes
    assert "all 4 steps finite" in judged.evidence
    assert judged.evidence.endswith("so training did not go on well")
    assert "diverged" in judged.evidence


def test_a_not_fix_whose_trial_and_baseline_had_zero_gradients_cannot_tell():
    # A loop that applies gradients it accumulated: the trials ran a step with no loss,
    # every gradient zero, the unchanged one's too. Such a trial is no evidence that the
    # remedy will not help (before: "so training did not go on well").
    item = NotFix("gradient_clipping", "divides by an infinite norm", structural=True)
    finding = dataclasses.replace(_finding(), not_fixes=(item,))
    still = dict(losses=(0.0,) * 4, grad_norms=(0.0,) * 4)
    baseline = TrialOutcome(None, "", 4, 4, None, (0.0,) * 4, grad_norms=(0.0,) * 4)
    (judged,) = judge(finding, baseline, [_outcome("gradient_clipping", **still)]).not_fixes
    assert judged.evidence.endswith("so it cannot tell")
    assert "did not go on well" not in judged.evidence


def test_standardised_targets_are_judged_by_their_own_falling_loss_not_the_one_before():
    # Squared errors of prices near 1e11 before the trouble; of standardised prices, ~1.
    # Compared with the loss before, any loss would pass: the trial's loss must fall.
    rescaled = Fix("normalize_target", "standardise y", "code", patch=_PATCH)
    finding = dataclasses.replace(_finding(), fixes=(rescaled,))
    falling = judge(finding, FAILED_BASELINE, [_outcome("normalize_target")], 1.9e11)
    assert _fix(falling, "normalize_target").verified is True
    assert "as a trial with no loss from before the trouble" in (
        _fix(falling, "normalize_target").evidence
    )
    flat = _outcome("normalize_target", losses=(0.9, 1.0, 1.1, 1.2))
    judged = judge(finding, FAILED_BASELINE, [flat], 1.9e11)
    assert _fix(judged, "normalize_target").verified is False
    assert "the loss did not fall over the trial" in _fix(judged, "normalize_target").evidence


def test_a_discriminators_loss_that_doubles_toward_its_equilibrium_has_not_diverged():
    # Over a trial of a guarded log that then trains a GAN 1500 steps well, the
    # discriminator's loss rose 0.45 -> 0.92 as the generator improved.
    rising = _outcome(
        "stable_softmax",
        losses=(5.3, 3.0, 1.5, 1.2),
        objective_losses=((0.45, 0.6, 0.8, 0.92), (5.3, 3.0, 1.5, 1.2)),
    )
    assert _judged_fix(rising, reference=0.7).verified is True
    # One far ahead at first rises toward 2 ln 2 = 1.39, its equilibrium: measured from at
    # least ln 2, not from its small start (0.18 -> 0.62, then 0.45 -> 1.4, are healthy).
    ahead = dataclasses.replace(rising, objective_losses=((0.18, 0.3, 0.5, 0.62), (5, 3, 2, 1)))
    assert _judged_fix(ahead, reference=0.7).verified is True
    balanced = dataclasses.replace(rising, objective_losses=((0.45, 0.9, 1.2, 1.4), (5, 3, 2, 1)))
    assert _judged_fix(balanced, reference=0.7).verified is True
    # Far past its equilibrium, the discriminator has lost: diverged.
    lost = dataclasses.replace(rising, objective_losses=((0.45, 1.2, 2.4, 3.0), (5, 3, 2, 1)))
    assert _judged_fix(lost, reference=0.7).verified is False


def test_a_fix_that_works_around_the_cause_ranks_after_the_one_that_removes_it():
    clip = Fix("clip_by_value", "clip each value", "", verified=True)
    mixed = Fix("mixed_precision", "the mixed policy", "", verified=True)
    finding = Finding("optimizer_overflow", 0, None, None, "", fixes=(clip, mixed))
    assert [f.family for f in ranked(finding).fixes] == ["mixed_precision", "clip_by_value"]
    # A verdict still comes first: an untried cure after a verified workaround.
    untried = dataclasses.replace(mixed, verified=None)
    finding = dataclasses.replace(finding, fixes=(untried, clip))
    assert [f.family for f in ranked(finding).fixes] == ["clip_by_value", "mixed_precision"]


def test_a_verified_fix_whose_loss_ends_far_behind_anothers_is_not_verified():
    # A recurrent net whose loss was 1.9e32 at its first step: clipping each value kept
    # the trial finite and "falling" to 5.8e22, where a better initialisation reached
    # 0.046 from the same start on the same batches.
    def patched(family):
        return Fix(family, family, "code", patch=_PATCH)

    finding = dataclasses.replace(
        _finding(),
        fixes=(patched("clip_by_value"), patched("better_init"), patched("gradient_clipping")),
        not_fixes=(),
    )
    outcomes = [
        _outcome("clip_by_value", losses=(1.9e32, 1e30, 5e25, 5.8e22)),
        _outcome("better_init", losses=(1.9e32, 3.0, 0.1, 0.046)),
        _outcome("gradient_clipping", losses=(1.9e32, 40.0, 2.0, 0.9)),  # 20x behind
    ]
    judged = judge(finding, FAILED_BASELINE, outcomes)
    clipped = _fix(judged, "clip_by_value")
    assert clipped.verified is False
    assert "its loss ended at 5.8e+22, where better_init (setting)" in clipped.evidence
    assert "reached 0.046" in clipped.evidence
    assert _fix(judged, "gradient_clipping").verified is True  # behind, but not far
    assert judged.fixes[-1].family == "clip_by_value"  # failed: last
    # Of two verified fixes the rules rank alike, one 20 times behind comes second.
    alike = dataclasses.replace(finding, fixes=(patched("safe_log"), patched("stable_softmax")))
    trials = [
        _outcome("safe_log", losses=(5.0, 40.0, 2.0, 0.9)),
        _outcome("stable_softmax", losses=(5.0, 1.0, 0.1, 0.045)),
    ]
    assert [f.family for f in judge(alike, FAILED_BASELINE, trials).fixes] == [
        "stable_softmax",
        "safe_log",
    ]
    # Trials from other starts are not compared.
    elsewhere = [
        dataclasses.replace(o, start=3) if o.remedy != "clip_by_value" else o for o in outcomes
    ]
    assert _fix(judge(finding, FAILED_BASELINE, elsewhere), "clip_by_value").verified is True


def test_a_copys_loss_that_blew_up_in_its_first_steps_and_stayed_there_diverged():
    from gradient_doctor.core.fix_trials import diverged

    # A learning rate a tenth of one that exploded: 1.0 at the first step, then ~9000 to
    # the end. Its first tenth is as high as its last.
    said = diverged([1.003, 842.9, 10940.0, 8363.0, 12023.0, *[9000.0] * 150])
    assert said.startswith("the loss ended far above where the run started (1.003 at its first")
    assert diverged([2.3, 2.2, 2.0, *[1.5] * 100]) is None
    assert diverged([0.84, 0.5, 0.1, *[-2.4] * 100]) is None  # a likelihood, falling below 0
    # An adversarial objective may rise from its first value as the players learn.
    assert diverged([0.69, 1.5, 2.4, *[3.0] * 100], alone=False) is None


def test_a_tenth_of_the_rate_that_held_but_diverged_is_tried_a_decade_lower():
    from gradient_doctor.core.pipeline.trials import _stronger_if_failed

    hundredth = Fix("lower_learning_rate", "lr 0.005", "", patch=_PATCH)
    tenth = Fix("lower_learning_rate", "lr 0.05", "", patch=_PATCH, stronger=hundredth)
    finding = dataclasses.replace(_finding(), fixes=(tenth,), not_fixes=())

    class Trials:
        def plan_for(self, remedy, fix):
            return fix.title

    diverging = TrialOutcome("lower_learning_rate", "lr 0.05", 4, 4, None, (8.3, 12.0, 16.0, 19.4))
    falling = TrialOutcome("lower_learning_rate", "lr 0.005", 4, 4, None, (8.3, 5.0, 3.0, 1.3))
    ran = []

    def run(plan):
        ran.append(plan)
        return falling

    outcome, changed = _stronger_if_failed(
        finding, "lower_learning_rate", diverging, Trials(), run, reference=8.0
    )
    assert ran == ["lr 0.005"]
    assert changed.fixes[0] is hundredth
    assert outcome.setting == (
        "lr 0.005, where lr 0.05 had held, but the loss diverged (8.3 -> 19.4)"
    )
    # A tenth that held, learning, is not tried further.
    ran.clear()
    kept, same = _stronger_if_failed(finding, "lower_learning_rate", falling, Trials(), run)
    assert ran == [] and kept is falling and same is finding


def test_a_trial_from_the_failing_step_and_one_from_that_steps_number_are_compared():
    # A focal loss's log of 0 at step 0: a clamp, tried from the failing step (start
    # None), crawled 9.97 -> 7.95; standardised features, tried from the start of
    # training (step 0: the same saved state), reached 0.094 on as many steps.
    def patched(family):
        return Fix(family, family, "code", patch=_PATCH)

    finding = dataclasses.replace(
        _finding(), step=0, fixes=(patched("safe_log"), patched("normalize_input")), not_fixes=()
    )
    outcomes = [
        _outcome("safe_log", losses=(9.97, 8.1, 8.0, 7.95)),
        _outcome("normalize_input", losses=(0.76, 0.3, 0.12, 0.094), start=0),
    ]
    judged = judge(finding, FAILED_BASELINE, outcomes)
    assert [(f.family, f.verified) for f in judged.fixes] == [
        ("normalize_input", True),
        ("safe_log", True),  # 85 times behind: ranked after, still verified
    ]
    # Failing at step 3, the two start from other states: not compared.
    later = dataclasses.replace(finding, step=3, category="exploding_gradients")
    assert [f.family for f in judge(later, FAILED_BASELINE, outcomes).fixes] == [
        "safe_log",
        "normalize_input",
    ]


def test_an_update_remedy_failing_at_once_from_the_failing_step_cannot_tell():
    # No state from before the updates that led to the forward failure at step 41 was
    # kept: the trial's first forward pass runs on the weights they left.
    lower = Fix("lower_learning_rate", "lower", "code", patch=_PATCH)
    finding = dataclasses.replace(_finding(), fixes=(lower,))
    judged = judge(finding, FAILED_BASELINE, [_outcome("lower_learning_rate", failed_at=0)])
    fix = _fix(judged, "lower_learning_rate")
    assert fix.verified is None
    assert fix.evidence.endswith("so this trial cannot tell")
    # From an earlier state, failing at once is no evidence either: that first forward
    # pass ran on the weights the trial started from (a GAN's critic after its first
    # update, met with the failing batch), before any update the remedy changes.
    earlier = _outcome("lower_learning_rate", failed_at=0, start=30)
    judged = judge(finding, FAILED_BASELINE, [earlier])
    assert _fix(judged, "lower_learning_rate").verified is None
    # Failing after some of its own updates, it is evidence against it.
    later = _outcome("lower_learning_rate", failed_at=6, start=30)
    judged = judge(finding, FAILED_BASELINE, [later])
    assert _fix(judged, "lower_learning_rate").verified is False


def test_zero_gradients_where_the_loss_is_exactly_zero_are_a_loss_at_its_floor():
    # A triplet loss whose margin every triplet already meets: 0, with zero gradients.
    floor = _outcome("x", losses=(0.0,) * 40, steps=40, grad_norms=(0.0,) * 40)
    assert floor.shortfall(reference=0.0) is None
    cut = _outcome("x", losses=(0.7,) * 40, steps=40, grad_norms=(0.0,) * 40)
    assert "exactly zero at 40 of its 40 steps" in cut.shortfall(reference=0.7)


def test_a_not_fix_on_the_updates_failing_at_once_from_the_failing_step_cannot_tell():
    lower = NotFix("lower_learning_rate", "only slows the drift", structural=False)
    finding = dataclasses.replace(_finding(), not_fixes=(lower,))
    judged = judge(finding, FAILED_BASELINE, [_outcome("lower_learning_rate", failed_at=0)])
    assert judged.not_fixes[0].evidence.endswith("so this trial cannot tell")


def test_a_loss_below_zero_from_the_start_that_fell_by_orders_of_magnitude_did_not_hold():
    # A clamp of a VAE's exp(log_var) left its KL term without a floor: -3.1e9 at the
    # trial's start, -5.3e13 at its end, "falling".
    runaway = tuple(-3.1e9 * 1.05**step for step in range(200))
    fix = _judged_fix(_outcome("stable_softmax", losses=runaway))
    assert fix.verified is False
    assert "the loss fell below zero without bound (" in fix.evidence
    # A density's likelihood below zero from the start falling on a few-fold held.
    density = tuple(-0.5 - 0.02 * step for step in range(200))
    assert _judged_fix(_outcome("stable_softmax", losses=density)).verified is True
