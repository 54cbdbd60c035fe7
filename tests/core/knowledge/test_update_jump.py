"""A forward failure thrown by one huge update: clipping is the remedy, not ruled out."""

from gradient_doctor.core.evidence import StepHistory
from gradient_doctor.core.knowledge import diagnose
from gradient_doctor.core.knowledge.remedies.history import update_jump

STEADY = (60.0, 70.0, 65.0, 58.0, 72.0)


def test_a_jump_at_the_last_good_steps_puts_clipping_first_and_says_why(make_evidence):
    diagnosis = diagnose(make_evidence(grad_norms=(*STEADY, 2.5e17), weights_upstream=True))
    assert diagnosis.fixes[0].family == "gradient_clipping"
    assert "gradient_clipping" not in [item.remedy for item in diagnosis.not_fixes]
    assert "The update at step 15 had a gradient norm of 2.5e+17" in diagnosis.explanation
    assert "median of the 5 steps before it (65)" in diagnosis.explanation
    # The rule's own fixes stay, after it; a smaller rate makes that update smaller too,
    # so it is a fix, last, no longer a remedy said only to slow a drift.
    assert "stable_softmax" in [fix.family for fix in diagnosis.fixes[1:]]
    assert diagnosis.fixes[-1].family == "lower_learning_rate"
    assert "lower_learning_rate" not in [item.remedy for item in diagnosis.not_fixes]


def test_steady_norms_leave_clipping_an_expectation_for_the_trials(make_evidence):
    diagnosis = diagnose(make_evidence(grad_norms=(*STEADY, 90.0), weights_upstream=True))
    clipping = next(item for item in diagnosis.not_fixes if item.remedy == "gradient_clipping")
    assert not clipping.structural
    assert "expected to delay it" in clipping.why
    assert "The update at step" not in diagnosis.explanation


def test_inputs_from_the_batch_alone_keep_clipping_ruled_out_as_a_fact(make_evidence):
    diagnosis = diagnose(make_evidence(grad_norms=(*STEADY, 2.5e17), weights_upstream=False))
    clipping = next(item for item in diagnosis.not_fixes if item.remedy == "gradient_clipping")
    assert clipping.structural and "no update reaches it" in clipping.why
    assert diagnosis.fixes[0].family != "gradient_clipping"


def test_clipping_already_on_is_not_proposed_again(make_evidence):
    evidence = make_evidence(
        grad_norms=(*STEADY, 2.5e17), weights_upstream=True, clipping="clipnorm=1.0"
    )
    assert diagnose(evidence).fixes[0].family != "gradient_clipping"


def test_the_jump_is_looked_for_only_among_the_last_steps_before_the_failure():
    def history(norms):
        return StepHistory(steps=tuple(range(len(norms))), grad_norms=tuple(norms))

    early = history((1.0, 1.0, 1.0, 500.0, 1.0, 1.0, 1.0, 1.0))
    assert update_jump(early, failing=8) is None
    late = history((1.0, 1.0, 1.0, 1.0, 500.0, None, 1.0))
    jump = update_jump(late, failing=7)
    assert (jump.step, jump.norm, jump.median) == (4, 500.0, 1.0)
    # Steps at or after the failing one are not the update that led to it.
    assert update_jump(history((1.0, 1.0, 1.0, 1.0, 500.0)), failing=4) is None
    # The first jump is named: the later, larger norms follow from it.
    chain = update_jump(history((1.0, 1.0, 1.0, 1.0, 800.0, 1e27)), failing=6)
    assert (chain.step, chain.norm) == (4, 800.0)
    # Too few steps before to call anything a jump.
    assert update_jump(history((1.0, 1.0, 500.0)), failing=3) is None


def test_a_forward_failure_at_step_0_rules_out_the_remedies_on_updates_as_a_fact(make_evidence):
    # No update ran before the first step's forward: "a smaller learning rate only slows
    # the drift of the weights" described updates that never happened.
    diagnosis = diagnose(make_evidence(step=0, weights_upstream=True))
    why = {item.remedy: item for item in diagnosis.not_fixes}
    for remedy in ("gradient_clipping", "lower_learning_rate"):
        assert why[remedy].structural, why[remedy]
        assert why[remedy].why.startswith("Step 0 failed in its forward pass, before any update")
    later = diagnose(make_evidence(step=57, weights_upstream=True))
    lower = next(item for item in later.not_fixes if item.remedy == "lower_learning_rate")
    assert not lower.structural


def test_a_failure_right_after_the_first_update_puts_clipping_first(make_evidence):
    # A recurrent net's first update (norm 478224) throws its kernel out; step 1's
    # forward overflows. No earlier norm exists to call it a jump against.
    import dataclasses

    first = StepHistory(steps=(0,), grad_norms=(478224.0,))
    evidence = dataclasses.replace(make_evidence(step=1, weights_upstream=True), history=first)
    diagnosis = diagnose(evidence)
    assert diagnosis.fixes[0].family == "gradient_clipping"
    assert "gradient_clipping" not in [item.remedy for item in diagnosis.not_fixes]
    assert "its update, with a gradient norm of 4.8e+05, is the only one before" in (
        diagnosis.explanation
    )
    later = dataclasses.replace(evidence, step=2)
    assert "is the only one before" not in diagnose(later).explanation


def test_a_failure_in_the_first_steps_puts_clipping_first_naming_the_largest_update(
    make_evidence,
):
    # Two SGD updates on targets in the 1e5s throw a regressor's output to -1e23: too
    # few norms for a median to call a jump against; the updates are all that changed.
    import dataclasses

    two = StepHistory(steps=(0, 1), grad_norms=(2.1e11, 3.3e21))
    thrown = ("4", "ReadVariableOp", 3.2e18)  # the values grew past 1e6 on their way
    evidence = dataclasses.replace(
        make_evidence(step=2, weights_upstream=True), history=two, growth=thrown
    )
    diagnosis = diagnose(evidence)
    assert diagnosis.fixes[0].family == "gradient_clipping"
    assert (
        "the 2 updates before this step are the only ones, the largest at step 1 with a "
        "gradient norm of 3.3e+21"
    ) in diagnosis.explanation
    unrecorded = dataclasses.replace(evidence, history=StepHistory(steps=(1,), grad_norms=(5.0,)))
    assert diagnose(unrecorded).fixes[0].family != "gradient_clipping"
    # Ordinary updates before a value a few units past its limit (a float16 exp at step
    # 2): nothing grew huge on the way, so no update is blamed.
    ordinary = dataclasses.replace(evidence, growth=None)
    assert diagnose(ordinary).fixes[0].family != "gradient_clipping"


def test_under_adam_the_update_that_threw_the_weights_is_bounded_by_the_rate(make_evidence):
    # Adam's first update moves each weight by about the learning rate, whatever the
    # gradient's norm: clipping the norm does not bound it, a lower rate does.
    import dataclasses

    first = StepHistory(steps=(0,), grad_norms=(478224.0,))
    evidence = make_evidence(step=1, weights_upstream=True)
    setup = dataclasses.replace(evidence.setup, optimizer="Adam")
    diagnosis = diagnose(dataclasses.replace(evidence, history=first, setup=setup))
    families = [fix.family for fix in diagnosis.fixes]
    assert "gradient_clipping" not in families
    assert families[-1] == "lower_learning_rate"
    assert "Adam divides each gradient by a running scale of its own" in diagnosis.explanation
    assert "Clipping the gradient norm bounds" not in diagnosis.explanation
