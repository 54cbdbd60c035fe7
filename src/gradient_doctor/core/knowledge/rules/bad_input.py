"""Non-finite values that are there before any op runs: in the batch, or in the state
the step begins with (a weight loaded with NaN, a `Normalization` adapted on data with a
missing value)."""

from __future__ import annotations

import ast
import math
from dataclasses import replace

from gradient_doctor.core.evidence import BadInput, BrokenState, Evidence
from gradient_doctor.core.findings import Fix, SourceLine
from gradient_doctor.core.knowledge.diagnosis import Diagnosis
from gradient_doctor.core.knowledge.remedies.not_fixes import nan_gradient_not_fixes
from gradient_doctor.core.knowledge.wording import (
    at_step,
    count,
    format_number,
    listing,
    op_place,
)

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


_TORCH_CLEAN_CODE = """\
# drop the examples that hold NaN or Inf, once, before training (x: [examples, ...]):
keep = torch.isfinite(x).flatten(1).all(dim=1) & torch.isfinite(y).reshape(len(y), -1).all(dim=1)
x, y = x[keep], y[keep]
# or impute them, e.g. with each column's mean over its finite values:
finite = torch.isfinite(x)
x = torch.where(finite, x, torch.nanmean(x.masked_fill(~finite, float("nan")), dim=0))"""

_TORCH_SKIP_CODE = """\
# in the training loop: leave the weights alone on a batch that is not finite
if not (torch.isfinite(x).all() and torch.isfinite(y).all()):
    continue"""


def diagnose(evidence: Evidence) -> Diagnosis | None:
    """Diagnose NaN or Inf in a weight or statistic the step began with, or in the
    input batch; decline when both were finite."""
    if evidence.broken_state is not None:
        return _broken_state(evidence, evidence.broken_state)
    if not evidence.bad_inputs:
        return None
    described = "; ".join(describe(bad) for bad in evidence.bad_inputs)
    tensors = listing([bad.label for bad in evidence.bad_inputs])
    torch = evidence.setup.framework == "torch"
    if _masked_labels(evidence):
        return _masked(evidence, described, tensors, torch)
    # What the not-fixes name: "inf" when the tensors held infinities and no NaN.
    inf_only = not any(bad.nan for bad in evidence.bad_inputs)
    kind = "inf" if inf_only and any(bad.inf for bad in evidence.bad_inputs) else "NaN"
    if all(bad.read_at is not None for bad in evidence.bad_inputs):
        # Tensors the step read that no op of it made: the batch, or a value the script
        # computed before the step (a rollout's log-probabilities, a running statistic).
        explanation = (
            f"Step {evidence.step} read tensors it did not compute that already held "
            f"non-finite values: {described}. They were made before this step began: by "
            "the data pipeline (the batch), or by your own code outside the step (a value "
            "computed once and reused over several updates, such as a rollout's "
            "log-probabilities or a running statistic): look at where they are computed."
        )
        cause = f"values made before the step: {tensors} held it before any op of it ran"
        item = evidence.bad_item
        if item is not None:
            explanation += (
                f" The first item of your dataset that holds one is item {item.index} of "
                f"`{item.dataset}`: {item.where}. No torch op of its `__getitem__` made "
                "the value, so the data it reads holds it (a missing value read as NaN, "
                "say): clean it where the data is loaded."
            )
    else:
        explanation = (
            f"The batch{at_step(evidence.step)} already holds non-finite values: {described}."
        )
        cause = f"the data: {tensors} held it before any op ran"
    return Diagnosis(
        category="bad_input",
        explanation=explanation,
        not_fixes=nan_gradient_not_fixes(cause, evidence.setup.framework, kind),
        fixes=(
            Fix(
                "clean_input",
                f"Remove or impute the non-finite values in {tensors}",
                _TORCH_CLEAN_CODE if torch else _CLEAN_CODE,
            ),
            Fix(
                "skip_nonfinite_batch",
                "Skip the update on a non-finite batch",
                _TORCH_SKIP_CODE if torch else _SKIP_CODE,
            ),
        ),
    )


_MASKED_CODE = """\
# in the loss: the mask first, then a finite stand-in for the missing values, so that the
# branch the mask drops computes finitely (its gradient is 0 x that, not 0 x NaN)
mask = tf.math.logical_not(tf.math.is_nan(y_true))
y_true = tf.where(mask, y_true, tf.zeros_like(y_true))
se = tf.where(mask, tf.square(y_pred - y_true), tf.zeros_like(y_pred))"""

_TORCH_MASKED_CODE = """\
# in the loss: the mask first, then a finite stand-in for the missing values, so that the
# branch the mask drops computes finitely (its gradient is 0 x that, not 0 x NaN)
mask = ~torch.isnan(target)
target = torch.where(mask, target, torch.zeros_like(target))
loss = torch.where(mask, (pred - target) ** 2, torch.zeros_like(pred)).sum() / mask.sum()"""


def _masked_labels(evidence: Evidence) -> bool:
    """Whether the non-finite values are all in the labels (`y` as `fit` names them) and
    the step's loss was finite: labels flow into the loss alone, so a finite loss means
    the loss left them out (features are different: a ReLU can swallow a NaN in the
    forward pass, 0 where NaN came in, while the first layer's gradient, x^T times the
    output's, is NaN)."""
    loss = evidence.step_loss
    if loss is None or not math.isfinite(loss):
        return False
    return all(
        bad.read_at is None and (bad.tensor == "y" or bad.tensor.startswith("y["))
        for bad in evidence.bad_inputs
    )


def _masked(evidence: Evidence, described: str, tensors: str, torch: bool) -> Diagnosis:
    """The batch's non-finite values never reached the loss, which was finite: the loss
    masks them (missing labels stored as NaN, left out by a select), but the branch it
    drops computed with them, and its gradient, 0 x NaN, is NaN. Dropping or imputing
    the data would lose or invent labels; the loss must compute finitely where it masks."""
    explanation = (
        f"The batch{at_step(evidence.step)} holds non-finite values: {described}. The "
        f"step's loss was finite ({format_number(evidence.step_loss)}): your loss leaves "
        "them out (missing values stored as NaN, masked by a select such as "
        f"{'torch.where' if torch else 'tf.where'}), but the branch it drops was still "
        "computed with them, and the gradient flows through both branches: 0 x NaN is "
        "NaN. Replace the missing values by any finite number inside the loss, after "
        "the mask is taken from them; the mask still leaves them out."
    )
    return Diagnosis(
        category="bad_input",
        explanation=explanation,
        not_fixes=nan_gradient_not_fixes(
            f"the data: {tensors} held it, masked out of the loss but not out of its gradient",
            evidence.setup.framework,
        ),
        fixes=(
            Fix(
                "safe_where",
                "Give the masked values a finite stand-in inside the loss, after the mask",
                _TORCH_MASKED_CODE if torch else _MASKED_CODE,
            ),
        ),
    )


def written_by_pipeline(evidence: Evidence, written: Diagnosis) -> Diagnosis:
    """Non-finite values in the batch that a function of the input pipeline wrote.

    `written` is the rules' diagnosis of that function's op, replayed on the element
    it turned non-finite: its explanation says why the op wrote them, and its fixes that
    rewrite the op's line come first (their patches go to the pipeline's function, not
    to the step); then the data remedies. Remedies of the training (a lower rate,
    clipping) change nothing of what the pipeline computes.
    """
    pipeline = evidence.pipeline
    data = diagnose(replace(evidence, pipeline=None))  # the batch described, its remedies
    explanation = (
        f"{data.explanation} The input pipeline wrote them, in {pipeline.stage}, replayed "
        f"here op by op on {pipeline.element}. {written.explanation}"
    )
    origin = pipeline.evidence.origin
    where = op_place(origin) if origin is not None else pipeline.stage
    rewrites = tuple(fix for fix in written.fixes if fix.rewrite)
    return Diagnosis(
        category="bad_input",
        explanation=explanation,
        not_fixes=nan_gradient_not_fixes(
            f"the data: {where} in the input pipeline made it", evidence.setup.framework
        ),
        fixes=(*rewrites, *data.fixes),
    )


def describe(bad: BadInput) -> str:
    """Describe one bad tensor: "`x` (32x10) has 3 NaN and 1 Inf in rows 4 and 17, ..."."""
    shape = "x".join("?" if size is None else str(size) for size in bad.shape)
    counts = " and ".join(
        part
        for part in (f"{bad.nan} NaN" if bad.nan else "", f"{bad.inf} Inf" if bad.inf else "")
        if part
    )
    read = f" `{bad.read_at.code.strip()}`" if bad.read_at is not None else ""
    shape = f"shape {shape}" if read else shape  # after a line of code, say what it is
    text = f"{bad.label}{read} ({shape}) has {counts or 'non-finite values'}"
    if bad.rows:
        text += f" in {'row' if len(bad.rows) == 1 else 'rows'} {listing(bad.rows)}"
    if bad.columns:
        noun = "feature column" if len(bad.columns) == 1 else "feature columns"
        text += f", {noun} {listing(bad.columns)}"
    return text


# Why each state-writing call left non-finite values.
_WHY_WRITTEN = {
    "adapt": "`adapt` learns its statistics from the data it is given, and that data held "
    "NaN or Inf (a missing value): the statistics are NaN, and so is every value the layer "
    "normalises with them (a ReLU after it may turn them into 0 on the CPU: the loss then "
    "stays finite and flat, and nothing learns); the rows that held them are in the "
    "training data too",
    "set_weights": "the arrays passed to `set_weights` held them",
    "load_weights": "the checkpoint held them: it was saved from weights that had already "
    "gone non-finite",
    "assign": "the value assigned held them",
}


def _broken_state(evidence: Evidence, state: BrokenState) -> Diagnosis:
    """A weight or statistic that was non-finite before the step: name it and its writer."""
    names = listing([f"`{name}`" for name in state.variables])
    holder = f" of layer `{state.layer}`" if state.layer else ""
    counts = " and ".join(
        count(number, noun)
        for number, noun in ((state.nan, "NaN value"), (state.inf, "infinite value"))
        if number
    )
    origin = evidence.origin
    reader = f" {op_place(origin)} only read them." if origin is not None else ""
    explanation = (
        f"{names}{holder} already held {counts or 'non-finite values'} before "
        f"{'the step' if evidence.step is None else f'step {evidence.step}'}: "
        f"no op of the step made them.{reader}"
    )
    written = state.written_at
    if state.written_by is not None and written is not None:
        explanation += (
            f" They were written by `{written.code}` ({written.file}:{written.line}): "
            f"{_WHY_WRITTEN.get(state.written_by, 'that call wrote them')}."
        )
    else:
        explanation += (
            " The doctor did not see the call that wrote them (`gradient-doctor run` "
            "sees the `set_weights`, `load_weights`, `adapt` and `assign` calls of your "
            "code; `Doctor()` and `watch()` only the training)."
        )
    return Diagnosis(
        category="bad_input",
        explanation=explanation,
        not_fixes=nan_gradient_not_fixes(
            f"the state the step began with: {names} held it", evidence.setup.framework
        ),
        fixes=(_state_fix(state, names),),
    )


def _state_fix(state: BrokenState, names: str) -> Fix:
    """The remedy for the call that wrote the broken state, written for its line."""
    call = _method_call(state.written_at, state.written_by)
    if state.written_by == "adapt":
        receiver, data = call or ("layer", "data")
        return Fix(
            "clean_input",
            "Drop (or impute) the examples with missing values, for `adapt` and for training",
            f"finite = np.isfinite({data}).reshape(len({data}), -1).all(axis=1)\n"
            f"{data} = {data}[finite]  # and the same rows of the targets: y = y[finite]\n"
            f"{receiver}.adapt({data})  # or impute the missing values first\n"
            "# a tf.data.Dataset: .filter(lambda x, y: tf.reduce_all(tf.math.is_finite(x)))",
        )
    if state.written_by == "load_weights":
        receiver, path = call or ("model", "path")
        return Fix(
            "finite_weights",
            "Load a checkpoint saved while the weights were finite",
            f"{receiver}.load_weights({path})  # holds NaN or Inf in {names}: use an earlier one\n"
            "# and save only finite weights from now on:\n"
            "callbacks = [keras.callbacks.TerminateOnNaN(), keras.callbacks.ModelCheckpoint(path)]",
        )
    if state.written_by in ("set_weights", "assign"):
        receiver, value = call or ("layer", "weights")
        method = state.written_by
        values = f"[{value}]" if method == "assign" else value
        return Fix(
            "finite_weights",
            f"Check the values before `{method}`: they hold NaN or Inf",
            f"assert all(np.isfinite(w).all() for w in {values}), 'NaN or Inf in the weights'\n"
            f"{receiver}.{method}({value})",
        )
    return Fix(
        "finite_weights",
        f"Find what wrote NaN or Inf into {names} before training, and check it",
        "for variable in model.weights:  # before training\n"
        "    assert np.isfinite(variable.numpy()).all(), variable.path",
    )


def _method_call(source: SourceLine | None, method: str | None) -> tuple[str, str] | None:
    """(receiver, first argument) of the `receiver.method(argument, ...)` call on a line."""
    if source is None or method is None:
        return None
    try:
        tree = ast.parse(source.code.strip())
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == method
            and node.args
        ):
            return ast.unparse(node.func.value), ast.unparse(node.args[0])
    return None
