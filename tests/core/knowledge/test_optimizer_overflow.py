"""Weights the optimizer's own update wrote non-finite are optimizer_overflow, not bad_input:
the update named with its step, the slot that overflowed against its dtype's range, and
the mixed policy before the workaround."""

from dataclasses import replace

from gradient_doctor.core.evidence import BrokenState, Evidence, StateValues, UpdateOverflow
from gradient_doctor.core.findings import Origin, SourceLine, TensorStats
from gradient_doctor.core.knowledge.registry import diagnose

_READ = TensorStats("float16", (6, 16), -0.5, 0.5, 12, 0, 0)
_ORIGIN = Origin("ReadVariableOp", "dense/ReadVariableOp", "dense", None, None, (), (_READ,))
_STATE = BrokenState(variables=("dense/kernel",), layer="dense", nan=12, inf=0)
_KERNEL = StateValues("dense/kernel", "float16", 96, nan=12, inf=0, largest=0.61)
_VELOCITY = StateValues(
    "adam/dense_kernel_velocity", "float16", 96, 0, 12, 64.81, "dense/kernel", "velocity"
)
_GRADIENT = StateValues("dense/kernel", "float16", 96, 0, 12, 824.5)
# A replay on the run's own batches: step 0 squared past float16, step 1 wrote the NaN.
_REPRODUCED = UpdateOverflow(
    optimizer="Adam",
    read_at=2,
    written_at=1,
    weights=(_KERNEL,),
    state=(replace(_VELOCITY, nan=12, inf=0, largest=94.38),),
    policy="float16",
    policy_site=SourceLine("train.py", 16, 'keras.config.set_dtype_policy("float16")'),
    replayed_from=0,
    first_step=0,
    first_state=(_VELOCITY,),
    weights_step=1,
    gradients=(_GRADIENT,),
    replayed_on="2 batches the run saw",
    reproduced=True,
)


def _evidence(overflow: UpdateOverflow | None) -> Evidence:
    return Evidence(
        step=0, phase=None, origin=_ORIGIN, broken_state=_STATE, update_overflow=overflow
    )


def test_the_update_is_named_with_its_step_the_slot_and_float16s_range():
    diagnosis = diagnose(_evidence(_REPRODUCED))
    assert diagnosis.category == "optimizer_overflow"
    text = diagnosis.explanation
    assert text.startswith(
        "The NaN that step 2 read in `dense/kernel` (12 NaN of 96) was written by the "
        "optimizer's own update at step 1"
    )
    assert 'Under the dtype policy "float16" (train.py:16) the weights are float16' in text
    assert "float16 holds at most 65504" in text
    assert "at step 0 the gradients of `dense/kernel` reached 824.5, and 12 values" in text
    assert "`adam/dense_kernel_velocity` (float16, 12 inf of 96; largest finite 64.81)" in text
    assert "Adam's `velocity` holds a running mean of each gradient's square" in text
    assert "At step 1 the update read those values back" in text
    assert "so those updates were applied" in text
    # The mixed policy removes the cause; clipping each value works around it.
    assert [fix.family for fix in diagnosis.fixes] == ["mixed_precision", "clip_by_value"]
    assert '"mixed_float16"' in diagnosis.fixes[0].code
    not_fixes = {item.remedy: item for item in diagnosis.not_fixes}
    assert not_fixes["lower_learning_rate"].structural  # step 0's gradients: no rate yet
    assert not_fixes["optimizer_epsilon"].structural
    assert not_fixes["loss_scaling"].structural
    assert not not_fixes["gradient_clipping"].structural  # left to its trial


def test_a_replay_on_other_batches_tells_how_but_claims_no_step_of_the_run():
    overflow = replace(_REPRODUCED, reproduced=False, replayed_on="2 batches of the data")
    text = diagnose(_evidence(overflow)).explanation
    assert "written by the optimizer's own update at step 1" in text
    assert "(not the run's own batches, so its steps need not be the run's)" in text
    # What the run's own state holds is said instead.
    assert "The optimizer's state holds NaN or inf as well: `adam/dense_kernel_velocity`" in text
    lower = next(
        n for n in diagnose(_evidence(overflow)).not_fixes if n.remedy == "lower_learning_rate"
    )
    assert not lower.structural


def test_without_a_replay_the_writer_is_still_the_update_and_the_rate_is_a_fix():
    overflow = UpdateOverflow(
        "SGD", read_at=7, written_at=6, weights=(replace(_KERNEL, dtype="float32"),)
    )
    diagnosis = diagnose(_evidence(overflow))
    assert diagnosis.category == "optimizer_overflow"
    assert "own update at step 6" in diagnosis.explanation
    assert "Replayed" not in diagnosis.explanation
    # float32 weights: no mixed policy; no square seen: no clipping of values either.
    assert [fix.family for fix in diagnosis.fixes] == ["lower_learning_rate"]
    assert diagnosis.not_fixes == ()


def test_broken_state_no_update_wrote_stays_bad_input():
    assert diagnose(_evidence(None)).category == "bad_input"
