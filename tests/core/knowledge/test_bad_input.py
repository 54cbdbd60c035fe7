"""Non-finite values that arrive with the batch."""

from gradient_doctor.core.evidence import BadInput
from gradient_doctor.core.knowledge import diagnose

X_BAD = BadInput("x", (32, 10), nan=3, inf=1, rows=(4, 17), columns=(2, 5))


def test_bad_input_names_tensor_rows_columns_and_counts(make_evidence, families, not_fixes):
    diagnosis = diagnose(make_evidence(with_origin=False, phase=None, bad_inputs=(X_BAD,)))
    assert diagnosis.category == "bad_input"
    assert "`x` (32x10) has 3 NaN and 1 Inf in rows 4 and 17, feature columns 2 and 5" in (
        diagnosis.explanation
    )
    assert families(diagnosis) == ["clean_input", "skip_nonfinite_batch"]
    assert "dataset.filter" in diagnosis.fixes[0].code
    assert "np.nanmean" in diagnosis.fixes[0].code
    assert not_fixes(diagnosis) == ["gradient_clipping", "lower_learning_rate"]
    assert "the data" in diagnosis.not_fixes[0].why


def test_bad_input_wins_over_any_op(make_evidence):
    assert diagnose(make_evidence(bad_inputs=(X_BAD,))).category == "bad_input"


def test_several_tensors_and_many_rows(make_evidence):
    labels = BadInput("y", (32, None), nan=0, inf=9, rows=tuple(range(9)), columns=())
    diagnosis = diagnose(make_evidence(bad_inputs=(X_BAD, labels)))
    assert "`y` (32x?) has 9 Inf in rows 0, 1, 2, 3, 4 and 4 more" in diagnosis.explanation
    assert "`x` and `y`" in diagnosis.fixes[0].title


def test_nan_the_input_pipeline_wrote_is_diagnosed_at_its_op_and_patched_there(
    make_evidence, families, not_fixes
):
    # The pipeline's function, replayed on the element it turned non-finite: a log of
    # a zero count. Its op's own rule explains it; its rewrite of that line comes first.
    from dataclasses import replace

    from gradient_doctor.core.evidence import PipelineOrigin, TensorStats

    zero = TensorStats("float32", (4,), min=0.0, max=9.0, nan=0, inf=0, zeros=1)
    made = TensorStats("float32", (4,), min=0.0, max=2.2, nan=0, inf=1, zeros=0)
    log = make_evidence(
        op="Log",
        code="return tf.math.log(raw_counts), y",
        layer=None,
        step=None,
        inputs=(zero,),
        outputs=(made,),
        weights_upstream=False,
    )
    batch = make_evidence(with_origin=False, phase=None, bad_inputs=(X_BAD,))
    evidence = replace(
        batch, pipeline=PipelineOrigin("`map(featurize)`", "element 245 of what it reads", log)
    )
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "bad_input"
    assert "The input pipeline wrote them, in `map(featurize)`" in diagnosis.explanation
    assert "The input to Log reached 0 (1 exact zero)" in diagnosis.explanation
    assert families(diagnosis)[0] == "safe_log"
    assert diagnosis.fixes[0].rewrite
    assert families(diagnosis)[1:] == ["clean_input", "skip_nonfinite_batch"]
    assert not_fixes(diagnosis) == ["gradient_clipping", "lower_learning_rate"]
    assert "tf.clip_by_global_norm of a NaN norm" in diagnosis.not_fixes[0].why
    # A PyTorch run's reasons name PyTorch's clipping call.
    torch_evidence = replace(evidence, setup=replace(evidence.setup, framework="torch"))
    (clipping, _) = diagnose(torch_evidence).not_fixes
    assert "torch.nn.utils.clip_grad_norm_ of a NaN norm" in clipping.why
    assert "tf." not in clipping.why
    origin = diagnosis.finding(evidence).origin  # the finding points there
    assert (origin.op, origin.source_kind) == ("Log", "input_pipeline")
    # Also when the step named an op of its own downstream of the bad batch (a max-pool
    # turned the NaN into float32's lowest value, and a convolution of it overflowed).
    conv = make_evidence(op="Conv2D", code='layers.Conv1D(32, 5, activation="relu"),')
    downstream = replace(evidence, origin=conv.origin, phase="forward")
    finding = diagnose(downstream).finding(downstream)
    assert (finding.origin.op, finding.origin.source_kind, finding.phase) == (
        "Log",
        "input_pipeline",
        None,
    )


def test_nan_labels_a_finite_loss_masked_out_get_a_finite_stand_in_inside_the_loss(
    make_evidence, families, not_fixes
):
    # Missing labels stored as NaN and left out of the loss by tf.where: the step's loss
    # was finite, its gradient NaN (0 x NaN in the branch the mask drops). Dropping or
    # imputing the rows would lose or invent labels.
    labels = BadInput("y", (64, 3), nan=22, inf=0, rows=(2, 3), columns=(0, 1, 2))
    from dataclasses import replace

    def evidence(bad, loss):
        made = make_evidence(with_origin=False, phase=None, bad_inputs=(bad,))
        return replace(made, step_loss=loss)

    diagnosis = diagnose(evidence(labels, 13.6))
    assert diagnosis.category == "bad_input"
    assert "The step's loss was finite (13.6): your loss leaves them out" in (diagnosis.explanation)
    assert families(diagnosis) == ["safe_where"]
    assert "y_true = tf.where(mask, y_true, tf.zeros_like(y_true))" in diagnosis.fixes[0].code
    assert not_fixes(diagnosis) == ["gradient_clipping", "lower_learning_rate"]
    # NaN features with a finite loss (a ReLU swallowed them going forward, the first
    # layer's gradient is NaN), or a NaN loss, keep the data remedies.
    assert families(diagnose(evidence(X_BAD, 0.8))) == ["clean_input", "skip_nonfinite_batch"]
    nan_loss = diagnose(evidence(labels, float("nan")))
    assert families(nan_loss) == ["clean_input", "skip_nonfinite_batch"]


def test_a_tensor_made_before_the_step_is_not_called_the_batch_and_its_inf_is_named():
    # A PPO rollout's log-probabilities, computed once under no_grad and reused over
    # several updates, hold -inf: no op of the failing step made them.
    from gradient_doctor.core.evidence import BadInput, Evidence, TrainingSetup
    from gradient_doctor.core.findings import SourceLine
    from gradient_doctor.core.knowledge import diagnose

    read = SourceLine("ppo.py", 43, "ratio = torch.exp(logp - old_logp[mb])")
    evidence = Evidence(
        626,
        "forward",
        None,
        bad_inputs=(BadInput("", (256,), 0, 1, (), (), read_at=read),),
        setup=TrainingSetup(framework="torch"),
    )
    diagnosis = diagnose(evidence)
    assert diagnosis.category == "bad_input"
    assert diagnosis.explanation.startswith(
        "Step 626 read tensors it did not compute that already held non-finite values: the "
        "tensor read at ppo.py:43 `ratio = torch.exp(logp - old_logp[mb])` (shape 256) has 1 Inf."
    )
    assert "a rollout's log-probabilities" in diagnosis.explanation
    clipping = diagnosis.not_fixes[0]
    assert clipping.why.startswith("The inf comes from values made before the step")
    assert "torch.nn.utils.clip_grad_norm_" in clipping.why
