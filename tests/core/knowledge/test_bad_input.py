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
