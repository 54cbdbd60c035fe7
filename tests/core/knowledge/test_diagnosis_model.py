"""The `Diagnosis` result refuses ids that the report schema does not know."""

import pytest

from gradient_doctor.core.findings import Fix, NotFix
from gradient_doctor.core.knowledge import Diagnosis


def test_valid_diagnosis_is_frozen():
    diagnosis = Diagnosis("forward_overflow", "why", (NotFix("larger_batch", "x"),), ())
    with pytest.raises(AttributeError):
        diagnosis.category = "bad_input"


def test_unknown_category_is_rejected():
    with pytest.raises(ValueError, match="Received: category='overflow'"):
        Diagnosis("overflow", "why", (), ())


def test_unknown_fix_family_or_remedy_is_rejected():
    with pytest.raises(ValueError, match="safe_exp"):
        Diagnosis("forward_overflow", "why", (), (Fix("safe_exp", "t", "c"),))
    with pytest.raises(ValueError, match="pray"):
        Diagnosis("forward_overflow", "why", (NotFix("pray", "x"),), ())
