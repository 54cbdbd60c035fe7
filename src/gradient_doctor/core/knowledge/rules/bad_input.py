"""Non-finite values that arrive with the batch itself, before any op runs."""

from __future__ import annotations

from gradient_doctor.core.evidence import BadInput, Evidence
from gradient_doctor.core.findings import Fix
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.not_fixes import nan_gradient_not_fixes
from gradient_doctor.core.knowledge.wording import at_step, listing

_CLEAN_CODE = """\
# drop the examples that hold NaN or Inf (tf.data):
dataset = dataset.filter(
    lambda x, y: tf.reduce_all(tf.math.is_finite(x)) & tf.reduce_all(tf.math.is_finite(y))
)
# or impute them before training (numpy), e.g. with each column's mean:
x = np.where(np.isfinite(x), x, np.nan)
x = np.where(np.isnan(x), np.nanmean(x, axis=0), x)"""

_SKIP_CODE = """\
# in a custom train_step: leave the weights alone on a batch that is not finite
finite = tf.reduce_all(tf.math.is_finite(x))
grads = [tf.where(finite, g, tf.zeros_like(g)) for g in grads]
optimizer.apply_gradients(zip(grads, model.trainable_variables))"""


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Diagnose NaN or Inf in the input batch; decline when the batch was finite."""
    if not evidence.bad_inputs:
        return None
    described = "; ".join(describe(bad) for bad in evidence.bad_inputs)
    tensors = listing([f"`{bad.tensor}`" for bad in evidence.bad_inputs])
    return Diagnosis(
        category="bad_input",
        explanation=f"The batch{at_step(evidence.step)} already holds non-finite values: "
        f"{described}.",
        not_fixes=nan_gradient_not_fixes(f"the data: {tensors} held it before any op ran"),
        fixes=(
            Fix("clean_input", f"Remove or impute the non-finite values in {tensors}", _CLEAN_CODE),
            Fix("skip_nonfinite_batch", "Skip the update on a non-finite batch", _SKIP_CODE),
        ),
    )


def describe(bad: BadInput) -> str:
    """Describe one bad tensor: "`x` (32x10) has 3 NaN and 1 Inf in rows 4 and 17, ..."."""
    shape = "x".join("?" if size is None else str(size) for size in bad.shape)
    counts = " and ".join(
        part
        for part in (f"{bad.nan} NaN" if bad.nan else "", f"{bad.inf} Inf" if bad.inf else "")
        if part
    )
    text = f"`{bad.tensor}` ({shape}) has {counts or 'non-finite values'}"
    if bad.rows:
        text += f" in {'row' if len(bad.rows) == 1 else 'rows'} {listing(bad.rows)}"
    if bad.columns:
        noun = "feature column" if len(bad.columns) == 1 else "feature columns"
        text += f", {noun} {listing(bad.columns)}"
    return text
