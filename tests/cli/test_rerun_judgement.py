"""How a rerun's report is judged and told: a patch that moved the trouble says where to."""

import dataclasses

from gradient_doctor.cli.patched_rerun import Rerun, _judged


def _report(steps, *problems):
    """A copy's report: its problems, and a loss that fell over its steps."""
    falling = [{"name": "loss", "steps": [0, 1, 2], "values": [1.0, 0.9, 0.8]}]
    return {"steps_watched": steps, "problems": list(problems), "series": falling}


def test_a_patched_copy_that_failed_elsewhere_names_the_op_and_line():
    moved = {
        "category": "forward_overflow",
        "step": 1,
        "origin": {
            "op": "Pow",
            "file": "train.py",
            "line": 24,
            "code": "loss = ((rate - y) ** 2).mean()",
            "gradient_of": None,
        },
    }
    rerun = _judged(_report(2, moved), 1, "the patched copy")
    assert not rerun.held
    assert rerun.why == (
        "the patched copy, run from the start, found forward_overflow at step 1 in Pow at "
        "train.py:24 `loss = ((rate - y) ** 2).mean()` (the original failed at step 1)"
    )


def test_a_backward_origin_names_the_forward_op_it_is_the_gradient_of():
    backward = {
        "category": "backward_singularity",
        "step": 7,
        "origin": {"op": "SqrtGrad", "file": "gan.py", "line": 9, "gradient_of": "Sqrt"},
    }
    why = _judged(_report(8, backward), 7, "the unchanged copy").why
    assert (
        "found backward_singularity at step 7 in SqrtGrad, the gradient of Sqrt, at gan.py:9 ("
        in why
    )


def test_a_problem_without_an_op_is_told_without_a_place():
    unlocated = {"category": "loss_spike", "step": 3, "origin": None}
    why = _judged(_report(4, unlocated), 3, "the patched copy").why
    assert why.endswith("found loss_spike at step 3 (the original failed at step 3)")


def test_a_copy_that_trained_past_the_failing_step_held():
    rerun = _judged(_report(40), 12, "the patched copy")
    assert rerun.held and rerun.steps == 40
    assert "past step 12 where the original failed" in rerun.why


def test_an_expectation_the_reruns_contradict_is_replaced_by_what_they_showed():
    from gradient_doctor.cli.fix_confirmation import _borne_out
    from gradient_doctor.core.findings import NotFix

    def overflow(step):
        return {"category": "forward_overflow", "step": step, "origin": None}

    delays = NotFix(
        "lower_learning_rate",
        "A smaller learning rate only slows the drift: it is expected to delay it.",
        structural=False,
    )
    baseline = _judged(_report(24, overflow(23)), 23, "the unchanged copy")
    sooner = _judged(_report(6, overflow(5)), 23, "the patched copy")
    assert sooner.failed_step == 5
    told = _borne_out(delays, sooner, baseline)
    assert told.why == (
        "Applied, it made things no better: the patched copy failed sooner, at step 5 "
        "(the unchanged copy at step 23)."
    )
    later = _judged(_report(41, overflow(40)), 23, "the patched copy")
    assert _borne_out(delays, later, baseline) is delays  # it did delay it: as expected


def _loss_series(values, name="loss"):
    return [{"name": name, "steps": list(range(len(values))), "values": list(values)}]


def test_a_finite_copy_whose_single_loss_diverged_did_not_hold():
    # A clamp that keeps a diverging run finite: the loss sits at -log(1e-7) afterwards.
    stuck = [1.6, 1.5, 2.4, 8.0, *[16.1] * 16]
    report = {**_report(20), "optimizers": 1, "series": _loss_series(stuck)}
    rerun = _judged(report, 8, "the patched copy")
    assert not rerun.held
    assert "trained 20 steps" in rerun.why
    assert rerun.why.endswith(
        "but the loss diverged (1.55 -> 16.1), so training did not go on well"
    )
    falling = {
        **_report(20),
        "optimizers": 1,
        "series": _loss_series([2.0 - i / 20 for i in range(20)]),
    }
    assert _judged(falling, 8, "the patched copy").held
    # Two optimizers (a GAN): the step's last loss is one of several; each objective's
    # own loss is judged, as a trial's objectives are.
    wandering = [0.7, 0.9, 0.6, 1.1, 0.8] * 4
    critic_stuck = {
        **_report(20),
        "optimizers": 2,
        "series": _loss_series(stuck)
        + _loss_series(stuck, "loss/objective1")
        + _loss_series(wandering, "loss/objective2"),
    }
    rerun = _judged(critic_stuck, 8, "the patched copy")
    assert not rerun.held
    assert "but objective 1's loss (of 2, in the order of the step's updates) diverged " in (
        rerun.why
    )
    trading = {
        **_report(20),
        "optimizers": 2,
        "series": _loss_series(stuck)
        + _loss_series(wandering, "loss/objective1")
        + _loss_series(wandering[::-1], "loss/objective2"),
    }
    assert _judged(trading, 8, "the patched copy").held


def test_a_signed_objective_diverges_only_when_it_grows_an_order_of_magnitude():
    # A WGAN's generator loss, -critic(fake) under a tanh critic: it crosses zero as the
    # critic learns (-0.25 -> 0.45 here) and has no floor to double from.
    crossing = [-0.3, -0.2, -0.25, 0.0, 0.2, 0.3, 0.4, *[0.45, 0.5, 0.4] * 4, 0.45]
    healthy_critic = [6.4, 3.0, 1.3, 0.9, *[0.5, 0.6, 0.4] * 5, 0.5]

    def gan(generator):
        return {
            **_report(20),
            "optimizers": 2,
            "series": _loss_series(generator)
            + _loss_series(healthy_critic, "loss/objective1")
            + _loss_series(generator, "loss/objective2"),
        }

    assert _judged(gan(crossing), 8, "the patched copy").held
    # The same loss rising to twenty times its starting magnitude has diverged.
    exploding = [*crossing[:10], *[5.0] * 10]
    rerun = _judged(gan(exploding), 8, "the patched copy")
    assert not rerun.held
    assert "objective 2's loss (of 2, in the order of the step's updates) diverged " in (rerun.why)


def test_a_copy_that_wrote_no_report_judges_nothing():
    # A crash before the report, or past its time on a loaded machine: neither held nor
    # failed, so a verified fix stays verified ("not confirmed"), never turned False.
    rerun = _judged(None, 8, "the patched copy")
    assert not rerun.held and rerun.inconclusive and not rerun.judged
    assert rerun.why == (
        "the patched copy wrote no report (it crashed, or ran too long to stop cleanly)"
    )
    assert _judged(_report(20), 8, "the patched copy").judged


def test_a_copy_stopped_at_its_time_says_how_far_it_held():
    # At its time limit the copy gets SIGTERM and writes its report ("interrupted"):
    # past the failing step it held as far as it ran; before it, it judges nothing.
    past = {**_report(150), "interrupted": "SIGTERM"}
    rerun = _judged(past, 40, "the patched copy", timeout=90.0)
    assert rerun.held and rerun.judged and not rerun.to_end
    assert rerun.why.endswith(
        "past step 40 where the original failed (the copy is stopped after 90 s: your "
        "script had more to run)"
    )
    short = {**_report(30), "interrupted": "SIGTERM"}
    early = _judged(short, 40, "the patched copy", timeout=90.0)
    assert not early.held and early.inconclusive and not early.judged
    assert "was stopped after 90 s, at 30 steps, before step 40" in early.why
    # A script that ends early on its own still judges: it did not reach the step.
    assert _judged(_report(30), 40, "the patched copy").judged


def test_a_lower_rate_confirmed_for_a_drift_says_a_longer_run_may_meet_it_later():
    from gradient_doctor.cli.fix_confirmation import _may_only_delay
    from gradient_doctor.core.findings import Finding, Fix

    lower = Fix("lower_learning_rate", "Lower it", "", verified=True, evidence="confirmed: held")
    drift = Finding(category="forward_domain", step=7, phase="forward", origin=None, explanation="")
    stopped = _judged({**_report(150), "interrupted": "SIGTERM"}, 7, "the copy", timeout=60.0)
    told = _may_only_delay(lower, drift, stopped, "A smaller learning rate only slows the drift.")
    assert told.verified is True
    assert "the copy held as far as it ran, but a longer run may meet it later" in told.evidence
    assert "(listed before as: A smaller learning rate only slows the drift.)" in told.evidence
    ended = _judged(_report(150), 7, "the copy")
    assert "the copy held to the end of your script, but" in (
        _may_only_delay(lower, drift, ended).evidence
    )
    # Gradients that grow step after step build up too (a lower rate held 200 steps past
    # step 148, then exploded at step 413 of 700): the same caveat. Clipping: none.
    exploding = dataclasses.replace(drift, category="exploding_gradients")
    assert "but a longer run may meet it later" in _may_only_delay(lower, exploding, ended).evidence
    clipping = dataclasses.replace(lower, family="gradient_clipping")
    assert _may_only_delay(clipping, drift, ended) is clipping
    dead = dataclasses.replace(drift, category="dead_units")
    assert _may_only_delay(lower, dead, ended) is lower


def test_a_copy_stopped_past_the_failure_says_the_script_had_more_to_run():
    # The copy of a 1075-step script is stopped 200 steps past its failing step 1: a
    # fix that only slowed the drift held there and failed at step 529 in full.
    stopped = _judged(_report(202), 1, "the patched copy", limit=202)
    assert stopped.held
    assert stopped.why.endswith(
        "past step 1 where the original failed (the copy is stopped 200 steps past it: "
        "your script had more to run)"
    )
    ended = _judged(_report(60), 43, "the patched copy", limit=244)
    assert "trained 60 steps from the start, to the end of your script, with every" in (ended.why)


def test_for_a_drift_a_fix_that_changes_the_op_ranks_before_one_that_only_slows_it():
    from gradient_doctor.cli.fix_confirmation import _may_only_delay
    from gradient_doctor.core.findings import Finding, Fix
    from gradient_doctor.core.fix_trials import ranked

    standardise = Fix("normalize_input", "Standardise", "", verified=True, evidence="held")
    guard = Fix("safe_log", "Guard the log", "", verified=True, evidence="held")
    lower = Fix("lower_learning_rate", "Lower it", "", verified=None, evidence="untried")
    drift = Finding(
        category="forward_domain",
        step=1,
        phase="forward",
        origin=None,
        explanation="",
        fixes=(standardise, lower, guard),
    )
    assert [f.family for f in ranked(drift).fixes] == [
        "safe_log",
        "normalize_input",
        "lower_learning_rate",
    ]
    exploding = dataclasses.replace(drift, category="exploding_gradients")
    assert [f.family for f in ranked(exploding).fixes][0] == "normalize_input"
    stopped = _judged(_report(202), 1, "the patched copy", limit=202)
    told = _may_only_delay(standardise, drift, stopped)
    assert "it changes the data, not the op that failed" in told.evidence
    assert "the copy held as far as it ran, but a longer run may meet it later" in told.evidence


def test_a_loss_that_runs_away_below_zero_did_not_hold():
    # A clamp of a hand-written InfoNCE's normaliser alone: the cross-entropy, never
    # negative as written, "falls" to -18675.
    runaway = [4.2, 4.0, 3.1, 1.0, -7.0, -300.0, *[-4315.0 - 1000 * i for i in range(14)]]
    report = {**_report(20), "optimizers": 1, "series": _loss_series(runaway)}
    rerun = _judged(report, 8, "the patched copy")
    assert not rerun.held
    assert "but the loss fell below zero without bound (4.1 -> " in rerun.why
    # A loss that was negative from the start (a density's NLL) may fall on.
    density = [-0.5 - 0.1 * i for i in range(20)]
    report = {**_report(20), "optimizers": 1, "series": _loss_series(density)}
    assert _judged(report, 8, "the patched copy").held


def test_a_tensorflow_copys_one_loss_is_judged_without_an_optimizer_count():
    # TensorFlow's reports write `optimizers` only when there are several. A clamp of an
    # NT-Xent loss's exp: 9.3 at the first step, then below zero by orders of magnitude.
    runaway = [9.3, 19.8, 21.0, 19.6, -4.8, *[-4.1e7 * 10 ** (i / 3) for i in range(40)]]
    report = {**_report(45), "series": _loss_series(runaway)}
    rerun = _judged(report, 1, "the patched copy")
    assert not rerun.held
    assert "but the loss fell below zero without bound" in rerun.why


def test_a_copy_whose_loss_barely_moved_did_not_go_on_learning():
    # Every update of a regression on unscaled features clipped to norm 1: finite, but
    # its loss 1.703e11 -> 1.698e11 over 200 steps.
    stalled = [1.703e11 - 2.5e6 * i for i in range(200)]
    report = {**_report(200), "series": _loss_series(stalled)}
    rerun = _judged(report, 3, "the patched copy")
    assert not rerun.held
    assert "but its loss barely moved (1.703e+11 at its first step" in rerun.why
    assert "0.3% lower), so training did not go on well" in rerun.why
    # The same copy learning by a few percent held.
    learning = [1.703e11 * (1 - 0.0003 * i) for i in range(200)]
    assert _judged({**_report(200), "series": _loss_series(learning)}, 3, "the copy").held
    # A whole script of 48 steps (4 epochs of 12 batches) whose loss stayed at 0.8546.
    short = [0.8546] * 8 + [0.8544] * 40
    rerun = _judged({**_report(48), "series": _loss_series(short)}, 0, "the patched copy")
    assert not rerun.held
    assert "but its loss barely moved (0.8546 at its first step, 0.8544" in rerun.why


def test_a_loss_that_may_go_below_zero_and_does_by_its_own_size_held():
    # A Poisson NLL without its log(y!) constant: 0.84 -> -2.4 as the clipped copy trains.
    poisson = [0.84, 0.6, 0.2, -0.4, -1.0, *[-2.4] * 15]
    report = {**_report(20), "optimizers": 1, "series": _loss_series(poisson)}
    assert _judged(report, 8, "the patched copy").held


def test_a_copy_that_held_but_warned_of_dead_units_says_so():
    # A lower rate that kept a OneCycle run finite and left a layer's ReLUs all dead.
    dead = {
        "category": "dead_units",
        "step": 25,
        "explanation": "In 1 layer more than 90% of the ReLU units output 0. A dead unit...",
    }
    report = {**_report(211), "optimizers": 1, "warnings": [dead]}
    rerun = _judged(report, 10, "the patched copy", limit=211)
    assert rerun.held  # said, not ruled: a skip connection may carry the signal past it
    assert rerun.why.endswith(
        "; but the copy itself warned: dead_units from step 25 (In 1 layer more than 90% of "
        "the ReLU units output 0.)"
    )


def test_a_fix_whose_trial_could_not_tell_is_left_to_a_rerun_however_its_evidence_ends():
    from gradient_doctor.cli.patched_rerun import untried_patch

    told = "all 200 steps finite (unchanged, it also stayed finite for 200 steps, so this "
    assert untried_patch(None, told + "trial cannot tell)")
    assert untried_patch(
        None, "tried ...; but the trial could only run ...: this trial cannot tell"
    )
    assert untried_patch(None, None)
    assert not untried_patch(True, told + "trial cannot tell)")
    assert not untried_patch(False, "tried ...: the loss or gradients were not finite again")


def test_a_finite_copy_whose_loss_was_never_seen_judges_nothing():
    # Per-sample gradients through torch.func (no backward() on a loss): a clamp's copy
    # ran finite while its likelihood got worse than an untrained model's, and was
    # "verified" on finiteness alone.
    unseen = {**_report(136), "optimizers": 1, "series": [{"name": "grad_norm", "values": [1.0]}]}
    rerun = _judged(unseen, 7, "the patched copy")
    assert not rerun.judged and not rerun.held
    assert "but no loss of it was seen" in rerun.why
    nulls = {**unseen, "series": [{"name": "loss", "values": [None, None]}]}
    assert not _judged(nulls, 7, "the patched copy").judged


def test_a_copy_whose_gradients_were_all_zero_did_not_hold():
    # clip_grad_norm_ over gradients whose squares overflow scales them by max_norm / inf:
    # the copy ran 60 finite steps with its loss flat at 4.497e+20 and nothing moving.
    frozen = {
        **_report(60),
        "optimizers": 1,
        "series": [
            {"name": "loss", "values": [4.497e20] * 60},
            {"name": "grad_norm/global", "values": [0.0] * 60},
        ],
    }
    rerun = _judged(frozen, 0, "the patched copy")
    assert rerun.judged and not rerun.held
    assert "the gradients were exactly zero at 60 of its 60 steps" in rerun.why
    # Zero gradients where the loss is exactly 0 are a loss at its floor (a margin met).
    floor = {
        **_report(60),
        "series": [
            {"name": "loss", "steps": list(range(60)), "values": [0.4] * 5 + [0.0] * 55},
            {
                "name": "grad_norm/global",
                "steps": list(range(60)),
                "values": [1.0] * 5 + [0.0] * 55,
            },
        ],
    }
    assert _judged(floor, 0, "the patched copy").held


def test_only_remedies_that_may_delay_a_drift_run_their_copy_to_the_scripts_end():
    from gradient_doctor.cli.fix_confirmation import runs_to_the_end

    assert runs_to_the_end("forward_domain", "lower_learning_rate")
    assert runs_to_the_end("forward_overflow", "gradient_clipping")
    assert runs_to_the_end("forward_overflow", "normalize_input")
    assert not runs_to_the_end("forward_domain", "safe_sqrt")  # the op itself changed
    assert not runs_to_the_end("backward_singularity", "lower_learning_rate")


def test_a_lower_rate_whose_copy_failed_is_rerun_a_decade_lower_and_says_so():
    from gradient_doctor.cli.fix_confirmation import _confirmed
    from gradient_doctor.core.findings import Finding, Fix

    tenth_patch, hundredth_patch = (
        "--- a/t.py\n+++ b/t.py\n(0.5)\n",
        "--- a/t.py\n+++ b/t.py\n(0.05)\n",
    )
    hundredth = Fix("lower_learning_rate", "Lower the rate to 0.05", "", patch=hundredth_patch)
    tenth = Fix(
        "lower_learning_rate",
        "Lower the rate to 0.5",
        "",
        patch=tenth_patch,
        evidence="not tried: no step function",
        stronger=hundredth,
    )
    problem = Finding("exploding_gradients", 6, None, None, "x", fixes=(tenth,))
    ran = []

    class Reruns:
        left = True

        def __init__(self, *args):
            pass

        def run(self, family, patch, untried, to_end=False):
            ran.append(patch)
            baseline = Rerun(False, 7, "the unchanged copy found exploding_gradients at step 6")
            if patch == tenth_patch:
                return Rerun(
                    False, 14, "the patched copy found exploding_gradients at step 13"
                ), baseline
            return Rerun(True, 40, "the patched copy trained 40 steps"), baseline

    import gradient_doctor.cli.fix_confirmation as confirmation

    original, confirmation._Reruns = confirmation._Reruns, Reruns
    try:
        (fix,) = _confirmed(problem, "t.py", [], 60.0, 200, lambda: False).fixes
    finally:
        confirmation._Reruns = original
    assert ran == [tenth_patch, hundredth_patch]
    assert fix.patch == hundredth_patch and fix.verified is True
    assert fix.evidence.startswith("confirmed: the patched copy trained 40 steps")
    assert fix.evidence.endswith(
        "; tried after Lower the rate to 0.5: applied, the patched copy found "
        "exploding_gradients at step 13"
    )


def _copy_report(steps: int, losses: list[float]) -> dict:
    """A copy's report with one optimizer and a loss at each of its steps."""
    series = [{"name": "loss", "steps": list(range(len(losses))), "values": losses}]
    return {"steps_watched": steps, "problems": [], "series": series, "optimizers": 1}


def test_a_copy_that_learned_far_slower_than_the_run_before_its_failure_did_not_hold():
    # The run reached 0.004 by step 300 and failed at step 325; a rate lowered a
    # hundredfold from the start stays finite but never leaves 0.09 (the majority class).
    original = [(step, 0.25 * 0.985**step + 0.003) for step in range(325)]
    slow = [0.24 - 0.15 * step / 480 for step in range(480)]
    rerun = _judged(_copy_report(480, slow), 325, "the patched copy", reference=original)
    assert not rerun.held
    assert "it learned far slower than your run: over steps 293-324" in rerun.why
    assert "so training did not go on well" in rerun.why
    # Learning somewhat slower (a tenth of the rate, 3x behind) still holds.
    close = [3 * loss for _, loss in original] + [0.01] * 155
    assert _judged(_copy_report(480, close), 325, "the patched copy", reference=original).held
    # No reference (a patch that rescales the loss) or a signed loss: not compared.
    assert _judged(_copy_report(480, slow), 325, "the patched copy").held
    # A run that failed at step 4: one step before it says nothing of a pace.
    early = [(0, 0.7), (1, 0.05), (2, 0.002), (3, 0.000178)]
    lower = [0.69, 0.4, 0.1, 0.013] + [0.001] * 100
    assert _judged(_copy_report(104, lower), 4, "the patched copy", reference=early).held
    signed = [(step, loss - 0.1) for step, loss in original]
    assert _judged(
        _copy_report(480, [v - 0.1 for v in slow]), 325, "the patched copy", reference=signed
    ).held


def test_the_runs_loss_points_come_from_its_series_finite_only():
    from gradient_doctor.cli.patched_rerun import loss_points

    series = [
        {"name": "grad_norm/global", "steps": [0], "values": [1.0]},
        {"name": "loss", "steps": [0, 1, 2], "values": [2.0, None, 1.5]},
    ]
    assert loss_points(series) == [(0, 2.0), (2, 1.5)]


def test_a_confirmed_copy_far_behind_the_best_one_ranks_after_it(monkeypatch):
    # A Gaussian likelihood crosses zero: clipping's copy held but its loss ended at 100
    # from 10.2, where a lower rate's ended at -0.07; a clamp's, at 2.7, is not far behind.
    from gradient_doctor.cli import fix_confirmation
    from gradient_doctor.core.findings import Finding, Fix

    endings = {"gradient_clipping": 100.0, "clip_input_domain": 2.7, "lower_learning_rate": -0.07}
    fixes = tuple(
        Fix(family, family, "", verified=True, evidence="tried", patch=f"--- a/t.py\n{family}\n")
        for family in ("clip_input_domain", "gradient_clipping", "lower_learning_rate")
    )
    problem = Finding("forward_overflow", 5, None, None, "x", fixes=fixes)

    class Reruns:
        left = True

        def __init__(self, *args):
            pass

        def run(self, family, patch, untried, to_end=False):
            ending = endings[family]
            return Rerun(True, 480, "held", first_loss=10.2, final_loss=ending), None

    monkeypatch.setattr(fix_confirmation, "_Reruns", Reruns)
    confirmed = fix_confirmation._confirmed(problem, "t.py", [], 60.0, 200, lambda: False)
    assert [f.family for f in confirmed.fixes][-1] == "gradient_clipping"
    clipping = confirmed.fixes[-1]
    assert clipping.verified is True
    assert clipping.evidence.endswith(
        "; ranked after lower_learning_rate: this copy's loss ended at 100 (its last "
        "tenth's mean, from 10.2 at its first step), where lower_learning_rate's copy, run "
        "as long, ended at -0.07"
    )
    assert all("ranked after" not in f.evidence for f in confirmed.fixes[:-1])


def test_a_remedy_a_rerun_turned_into_a_fix_is_ranked_with_the_confirmed_ones(monkeypatch):
    # Clipping was listed as not expected to help; its rerun held, but far behind the
    # lower rate's copy, which held too: it comes after it.
    from gradient_doctor.cli import fix_confirmation
    from gradient_doctor.core.findings import Finding, Fix, NotFix

    endings = {"lower_learning_rate": -0.06, "gradient_clipping": 100.0}
    patch = "--- a/t.py\n"
    lower = Fix("lower_learning_rate", "lower", "", verified=True, evidence="tried", patch=patch)
    clipping = NotFix(
        "gradient_clipping",
        "expected only to delay it",
        structural=False,
        fix=Fix("gradient_clipping", "clip", "", patch=patch),
    )
    problem = Finding("forward_overflow", 5, None, None, "x", fixes=(lower,), not_fixes=(clipping,))

    class Reruns:
        left = True

        def __init__(self, *args):
            pass

        def run(self, family, patch, untried, to_end=False):
            baseline = Rerun(False, 6, "the unchanged copy found forward_overflow at step 5")
            rerun = Rerun(True, 480, "held", first_loss=10.2, final_loss=endings[family])
            return rerun, baseline

    monkeypatch.setattr(fix_confirmation, "_Reruns", Reruns)
    confirmed = fix_confirmation._confirmed(problem, "t.py", [], 60.0, 200, lambda: False)
    assert [f.family for f in confirmed.fixes] == ["lower_learning_rate", "gradient_clipping"]
    assert "ranked after lower_learning_rate" in confirmed.fixes[1].evidence


def test_a_silent_failures_copy_lower_by_less_than_a_tenth_is_not_said_to_learn_no_better():
    # A softmax handed to cross_entropy: the copy without it ended at 2.081 where the run
    # was at 2.254 (7% lower): not verified, but not "no better" either.
    run = [(step, 2.3 - 0.048 * step / 200) for step in range(201)]
    copy = [2.3 - 0.22 * step / 200 for step in range(201)]
    rerun = _judged(_copy_report(201, copy), 0, "the patched copy", reference=run, learn_more=True)
    assert not rerun.held
    assert "no better" not in rerun.why
    assert "lower by 7%, less than the 10% that tells a fix from the noise" in rerun.why
    # A copy whose loss ended above the run's learned no better.
    worse = _judged(
        _copy_report(201, [2.3] * 201), 0, "the patched copy", reference=run, learn_more=True
    )
    assert worse.why.endswith("so it learned no better")


def test_a_copy_killed_before_its_report_says_how_it_ended_and_its_last_words(
    tmp_path, monkeypatch
):
    # A copy that dies hard (here it kills itself) writes no report: its verdict says
    # how the process ended and what it printed last, not only "it crashed".
    from gradient_doctor.cli.patched_rerun import rerun_patched

    (tmp_path / "dies.py").write_text(
        "import os, signal\n"
        "print('loading the shards', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    monkeypatch.chdir(tmp_path)
    rerun = rerun_patched("dies.py", [], None, failed_at=3, steps_past=10, timeout=120)
    assert rerun.inconclusive and not rerun.held
    assert rerun.why.startswith("the unchanged copy wrote no report: it ended with status -9")
    assert rerun.why.endswith("its last output: loading the shards")


def _broken_path(*variables):
    return {
        "category": "disconnected_gradients",
        "step": 0,
        "disconnected": {"variables": list(variables), "all": False, "break": None},
    }


def test_a_copy_that_mended_its_path_holds_though_another_path_is_still_broken():
    # A stop_gradient on a gate removed; the router's argmax, another problem of the
    # run, still cuts the router's path in the copy.
    mended = frozenset({"gate"})
    report = _report(64, _broken_path("router/kernel", "router/bias"))
    rerun = _judged(report, 0, "the patched copy", disconnected=mended)
    assert rerun.held
    assert "gate got a gradient, and the path it still found broken, to router/kernel, " in (
        rerun.why
    )
    # Still broken to the gate: the patch did not mend it.
    report = _report(64, _broken_path("router/kernel", "gate"))
    assert not _judged(report, 0, "the patched copy", disconnected=mended).held
    # Without the variables (a numerical problem's copy), any problem fails it.
    report = _report(64, _broken_path("router/kernel"))
    assert not _judged(report, 0, "the patched copy").held


def test_an_expected_not_fix_whose_patched_copy_crashed_is_not_borne_out(monkeypatch):
    # A clip line that read the trainer's `self.parameters()`: its copy raised.
    from gradient_doctor.cli import fix_confirmation
    from gradient_doctor.cli.patched_rerun import Rerun
    from gradient_doctor.core.findings import Finding, Fix, NotFix

    def rerun_patched(script, args, patch, *rest, **options):
        if patch is None:  # the unchanged copy fails again, as the run did
            return Rerun(False, 12, "the unchanged copy found forward_domain", failed_step=11)
        error = "AttributeError: 'Trainer' object has no attribute 'parameters'"
        return Rerun(False, 0, f"the patched copy failed: {error}", crashed=True)

    monkeypatch.setattr(fix_confirmation, "rerun_patched", rerun_patched)
    clip = Fix("gradient_clipping", "Clip", "code", patch="--- a/t.py\n+++ b/t.py\n")
    expected = NotFix("gradient_clipping", "it is expected to delay it", None, False, clip)
    problem = Finding("forward_domain", 11, "forward", None, "", not_fixes=(expected,))
    judged = fix_confirmation._confirmed(problem, "t.py", [], 60.0, 200, lambda: False)
    (item,) = judged.not_fixes
    assert "AttributeError" in item.evidence
    assert item.evidence.endswith("its patch failed, not the remedy, so this rerun cannot tell")
    assert item.untried_expectation  # said as an expectation, not as borne out


def test_a_copy_the_runs_own_signal_stopped_judges_nothing(monkeypatch):
    # Ctrl-C reaches the copy too: its report says interrupted, which is no time limit.
    from gradient_doctor.cli import fix_confirmation
    from gradient_doctor.cli.patched_rerun import Rerun

    def rerun_patched(*args, **kwargs):
        why = "the patched copy trained 49 steps (the copy is stopped after 60 s: ...)"
        return Rerun(True, 49, why, interrupted=True)

    monkeypatch.setattr(fix_confirmation, "rerun_patched", rerun_patched)
    reruns = fix_confirmation._Reruns("t.py", [], 5, 200, 60.0, lambda: True)
    rerun = reruns._rerun("safe_log", "--- a/t.py\n", 200)
    assert not rerun.held and rerun.inconclusive
    assert rerun.why == (
        "the copy was stopped by the signal that stopped your run, after 49 steps, so it "
        "judges nothing"
    )
    # Stopped by its own time limit, with no signal to the run: as the copy said.
    reruns = fix_confirmation._Reruns("t.py", [], 5, 200, 60.0, lambda: False)
    assert reruns._rerun("safe_log", "--- a/t.py\n", 200).held


def test_only_a_remedy_on_the_updates_trails_a_copy_that_learned_twice_as_well():
    from gradient_doctor.cli.fix_confirmation import copies_behind

    # A lower rate (a remedy on the updates, key 0) ended at 167 where clipping reached 35.
    held = {
        0: Rerun(True, 160, "held", first_loss=1100.0, final_loss=167.0),
        1: Rerun(True, 160, "held", first_loss=1100.0, final_loss=35.0),
    }
    assert copies_behind(held, crawls={0, 1}) == {0: 1}
    # Float32 variables under a float16 policy (key 0, the fix of the cause) at 2.1 where
    # clipping each value reached 0.48: 4.4x, not the 10x another fix must trail by.
    held = {
        0: Rerun(True, 128, "held", first_loss=2389.0, final_loss=2.1),
        1: Rerun(True, 128, "held", first_loss=2389.0, final_loss=0.48),
    }
    assert copies_behind(held, crawls={1}) == {}
