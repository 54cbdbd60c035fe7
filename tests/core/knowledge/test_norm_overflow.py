"""Finite gradients whose global norm overflows float32: what the update would have done
is said for the user's optimizer (SGD stays finite but runs away; Adam writes inf)."""

from gradient_doctor.core.evidence import Evidence, TrainingSetup
from gradient_doctor.core.knowledge.rules import norm_overflow


def _explained(**setup) -> str:
    evidence = Evidence(
        step=15, phase=None, origin=None, setup=TrainingSetup(**setup), overflowed_norm=3.1e21
    )
    diagnosis = norm_overflow.diagnose(evidence)
    assert diagnosis.category == "exploding_gradients"
    return diagnosis.explanation


def test_plain_sgd_is_not_said_to_write_inf_but_to_run_away():
    said = _explained(optimizer="SGD", learning_rate=0.01)
    assert "SGD keeps no square of the gradients, so its update would have stayed finite" in said
    assert "Adam and RMSprop" not in said


def test_adam_would_freeze_the_weights_and_clipping_by_the_norm_write_nan():
    # RMSprop's inf squares left a recurrent net's loss frozen at 1.4e26, finite.
    adam = _explained(optimizer="Adam")
    assert "those squares would be inf, and every later update of their weights 0" in adam
    assert "stop training for good with every value finite" in adam
    clipped = _explained(optimizer="SGD", clipping="global_clipnorm=1.0")
    assert "the update would have written NaN into the weights" in clipped


def test_a_blow_up_an_exp_began_is_explained_and_both_exps_are_clipped():
    from gradient_doctor.core.evidence import OpCall
    from gradient_doctor.core.findings import SourceLine, TensorStats

    def exp_call(line: int, code: str, reached: float) -> OpCall:
        column = code.index("tf.exp")
        return OpCall(
            "Exp",
            SourceLine("vae.py", line, code, column=column, end_column=len(code)),
            (TensorStats("float32", (8, 4), -20.0, 45.0, nan=0, inf=0, zeros=0),),
            outputs=(TensorStats("float32", (8, 4), 0.0, reached, nan=0, inf=0, zeros=0),),
        )

    sampling = exp_call(12, "z = mu + tf.exp(0.5 * log_var) * eps", 3.5e19)
    kl = exp_call(15, "kl = tf.reduce_sum(1 + log_var - tf.exp(log_var))", 1.2e29)
    evidence = Evidence(
        step=0,
        phase=None,
        origin=None,
        setup=TrainingSetup(optimizer="Adam"),
        overflowed_norm=4e27,
        step_loss=2e24,
        forward_blowup=(sampling, kl),
    )
    diagnosis = norm_overflow.diagnose(evidence)
    assert (
        "because the forward pass was (the step's loss was 2e+24): its values first grew past "
        "1e6 at Exp (vae.py:12), from inputs up to 45 to 3.5e+19" in diagnosis.explanation
    )
    assert "1 more Exp call of the step went past 1e6 too (line 15)" in diagnosis.explanation
    clip = diagnosis.fixes[0]
    assert clip.family == "clip_input_domain"
    assert [(edit.line, edit.new_lines) for edit in clip.edits] == [
        (12, ("z = mu + tf.exp(tf.minimum(0.5 * log_var, 13.0)) * eps",)),
        (15, ("kl = tf.reduce_sum(1 + log_var - tf.exp(tf.minimum(log_var, 13.0)))",)),
    ]


def test_no_blow_up_seen_leaves_the_fixes_as_they_were():
    evidence = Evidence(step=3, phase=None, origin=None, overflowed_norm=3e21)
    families = [fix.family for fix in norm_overflow.diagnose(evidence).fixes]
    assert "clip_input_domain" not in families
