"""What each fix trial puts in place: the patch as written, or the setting it writes.

A patch of the user's functions runs from the patched copy of their file
(`patched_functions`); a patch of the line that built the optimizer or a layer runs
as the setting it writes (the same learning rate, clipping norm, initializer or
constraint, on the layers built on that line); a patch of the `fit` line runs on
`fit`'s data standardised by the same expression. Each plan is a context manager
factory the trial runner holds open while it traces and runs the step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar

import keras
import tensorflow as tf

from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Finding, Fix
from gradient_doctor.core.fix_placement import CLIP_VALUE, clipping_threshold
from gradient_doctor.core.knowledge.rewrites.layer import starts_below_threshold
from gradient_doctor.core.trial_plans import (
    LEARNING_RATE_DIVISOR,
    TrialPlan,
    not_possible,
    patch_plan,
    remedies_of,
)
from gradient_doctor.tf_adapter._tf_internals import (
    learning_rate_variable,
    set_learning_rate_variable,
    trainable_variables_of,
)
from gradient_doctor.tf_adapter.step import loss_scale
from gradient_doctor.tf_adapter.step.clipping import clipping_of
from gradient_doctor.tf_adapter.trials.fix_sites import layer_site, layers_built_at
from gradient_doctor.tf_adapter.trials.patched_source import patched_functions


def trial_plans(finding: Finding, evidence: Evidence, optimizer, fit_call=None) -> list[TrialPlan]:
    """The remedies of `finding` (fixes and not-fixes) that can be tried, in its order.

    A fix with a patch is tried as the patch is written: a patch of the optimizer's
    line by the setting it writes (`Fix.trial_setting`: the same learning rate, the
    same clipping norm); any other by running the user's functions from the patched
    copy of their file (`patched_functions`). A remedy with no patch is still tried,
    for the evidence (it cannot be marked verified). Two fixes with the same patch
    are run once.
    """
    plans = (
        plan_for(remedy, fix, evidence, optimizer, fit_call) for remedy, fix in remedies_of(finding)
    )
    return [plan for plan in plans if plan is not None]


def plan_for(
    remedy: str, fix: Fix | None, evidence: Evidence, optimizer, fit_call=None
) -> TrialPlan | None:
    """The plan that tries `remedy` as `fix` writes it (see `trial_plans`), or None
    when there is nothing to try."""
    # A loss-scaling optimizer's own learning rate and clipping are not the ones used.
    optimizer = loss_scale.inner_optimizer(optimizer) if optimizer is not None else None
    setting = fix.trial_setting if fix is not None else None
    if setting is None and remedy in _SETTINGS:
        setting = _SETTINGS[remedy](evidence)
    if setting is not None and setting[0] in _STANDARDISED:
        return _standardised(remedy, fit_call, setting[1], _STANDARDISED[setting[0]])
    if setting is not None and setting[0] == "scale_x":
        return _scaled(remedy, fit_call)
    if setting is not None and setting[0] == "finite_rows":
        return _finite_rows(remedy, fit_call)
    if setting is not None and setting[0] == "jit_compile":
        return TrialPlan(remedy, "the step compiled without XLA", without_xla)
    if setting is not None and setting[0] == "initial_value" and fix is not None:
        return _start_plan(remedy, fix, optimizer)
    if setting is not None and setting[0] == "dtype_policy":
        return TrialPlan(remedy, "", not_possible(_POLICY_UNTRIED))
    if setting is not None:
        edits = fix.edits if fix is not None else ()
        return setting_plan(remedy, optimizer, *setting, edits=edits)
    if fix is not None and fix.patch:
        return patch_plan(remedy, fix, patched_functions)
    return None


# Why a new dtype policy is left to the patched copy run from the start.
_POLICY_UNTRIED = (
    "a dtype policy sets each variable's dtype when its layer is built (and `compile` "
    "wraps the optimizer for loss scaling under it), so no trial inside the run can put "
    "it in place: only the patched script, run again from the start, builds the model "
    "under it"
)


# The settings a remedy without a patch is tried with (what its patch would write).
_SETTINGS: dict[str, Callable[[Evidence], tuple[str, float]]] = {
    "lower_learning_rate": lambda evidence: ("learning_rate_scale", 1 / LEARNING_RATE_DIVISOR),
    "gradient_clipping": lambda evidence: ("global_clipnorm", clipping_threshold(evidence.history)),
    "clip_by_value": lambda evidence: ("clipvalue", CLIP_VALUE),
}


# True while a trial's plan compiles the step without XLA (`without_xla`): the trial
# runner traces the step as the user's run compiled it otherwise.
xla_turned_off: ContextVar[bool] = ContextVar("gradient_doctor_xla_turned_off", default=False)


@contextmanager
def without_xla() -> Iterator[None]:
    """Trace the trial's step without XLA, as the `jit_compile=False` patch compiles it."""
    token = xla_turned_off.set(True)
    try:
        yield
    finally:
        xla_turned_off.reset(token)


# The weight of a layer that each layer setting a patch writes acts on.
_WEIGHT_OF = {
    "kernel_constraint": "kernel",
    "kernel_initializer": "kernel",
    "recurrent_initializer": "recurrent_kernel",
}


def setting_plan(remedy: str, optimizer, name: str, value, edits=()) -> TrialPlan:
    """A trial plan that sets the optimizer, or the layers, as a patch of the lines that
    built them would build them."""
    if optimizer is None:
        return TrialPlan(remedy, "", not_possible("no optimizer was seen"))
    if name in ("learning_rate", "learning_rate_scale"):
        return _learning_rate_plan(remedy, optimizer, name, value)
    if name in _WEIGHT_OF:
        return _layer_plan(remedy, layers_built_at(optimizer, edits), name, value)
    if name == "epsilon":
        return _epsilon_plan(remedy, layers_built_at(optimizer, edits), value)
    already = [f"{clip}={value}" for clip, value in clipping_of(optimizer).items() if clip != name]
    if already:
        reason = "clipping is already on: " + ", ".join(already)
        return TrialPlan(remedy, reason, not_possible(reason))
    before = getattr(optimizer, name, None)

    @contextmanager
    def apply() -> Iterator[None]:
        setattr(optimizer, name, value)
        try:
            yield
        finally:
            setattr(optimizer, name, before)

    return TrialPlan(remedy, f"{name}={value:.4g}", apply)


# The settings of a `fit` line's patch standardising a part of its data: which part.
_STANDARDISED = {"standardise_x": "x", "standardise_y": "y"}


def _standardised(remedy: str, fit_call, epsilon: float, part: str) -> TrialPlan:
    """Run on `fit`'s data with the features (`part` "x") or the targets ("y")
    standardised as the patched fit line does."""
    batches = fit_call.standardised_batches(epsilon, part) if fit_call is not None else None
    what = {"x": "features", "y": "targets"}[part]
    if batches is None:
        return TrialPlan(remedy, "", not_possible(f"fit's {what} are not one NumPy array"))
    return TrialPlan(remedy, f"the {what} standardised", nullcontext, batches=batches)


def _scaled(remedy: str, fit_call) -> TrialPlan:
    """Run on `fit`'s data with the features divided by their largest magnitude, as the
    patched fit line does."""
    batches = fit_call.scaled_batches() if fit_call is not None else None
    if batches is None:
        return TrialPlan(remedy, "", not_possible("fit's features are not one NumPy array"))
    return TrialPlan(
        remedy, "the features scaled by their largest magnitude", nullcontext, batches=batches
    )


def _finite_rows(remedy: str, fit_call) -> TrialPlan:
    """Run on `fit`'s data without the rows that hold NaN or Inf, as the patched fit line
    leaves them out."""
    batches = fit_call.finite_batches() if fit_call is not None else None
    if batches is None:
        return TrialPlan(remedy, "", not_possible("fit's data is not NumPy arrays"))
    return TrialPlan(remedy, "the rows holding NaN or Inf left out", nullcontext, batches=batches)


def _layer_plan(remedy: str, layers: list, name: str, value) -> TrialPlan:
    """Bound the kernels of `layers` (`kernel_constraint`), or draw them afresh at the
    trial's start with the initializer the patch names (He's for `kernel_initializer`,
    an orthogonal recurrent kernel for `recurrent_initializer`), as the patch builds them."""
    weight = _WEIGHT_OF[name]
    kernels = [
        getattr(layer, weight) for layer in layers if getattr(layer, weight, None) is not None
    ]
    if not kernels:
        return TrialPlan(remedy, "", not_possible("the layers the patch changes were not found"))
    names = ", ".join(f"`{layer.name}`" for layer in layers)

    # He's initialisation's patch also starts at 0 the biases a constant put below the
    # units' threshold (`he_initialised`): so does its trial.
    zeroed = [
        layer.bias
        for layer in layers
        if name == "kernel_initializer"
        and getattr(layer, "bias", None) is not None
        and (site := layer_site(layer)) is not None
        and starts_below_threshold(site)
    ]

    @contextmanager
    def apply() -> Iterator[None]:
        before = [kernel.constraint for kernel in kernels]
        for index, kernel in enumerate(kernels):
            if name == "kernel_constraint":
                kernel.constraint = keras.constraints.MaxNorm(max_value=float(value))
            else:  # the patch draws these kernels at construction; the trial at its start
                draw = keras.initializers.get({"class_name": str(value), "config": {"seed": index}})
                kernel.assign(draw(tuple(kernel.shape), dtype=kernel.dtype))
        for bias in zeroed:
            bias.assign(keras.ops.zeros(tuple(bias.shape), dtype=bias.dtype))
        try:
            yield
        finally:
            for kernel, constraint in zip(kernels, before):
                kernel.constraint = constraint

    what = f"MaxNorm({value:g})" if name == "kernel_constraint" else f'"{value}"'
    biases = ' and bias_initializer="zeros"' if zeroed else ""
    return TrialPlan(remedy, f"{name}={what}{biases} on {names}", apply)


def _start_plan(remedy: str, fix: Fix, optimizer) -> TrialPlan:
    """Start the variable the patch makes at another value: every element of it set to
    that value at the trial's start, as the patched line makes it."""
    start = fix.variable_start
    trained = trainable_variables_of(optimizer) if optimizer is not None else []
    found = [v for v in trained if start is not None and start.name in (v.path, v.name)]
    if len(found) != 1:
        return TrialPlan(remedy, "", not_possible("the variable the patch makes was not found"))
    (variable,) = found

    @contextmanager
    def apply() -> Iterator[None]:
        variable.assign(keras.ops.full(tuple(variable.shape), start.start, variable.dtype))
        yield

    return TrialPlan(remedy, f"`{start.name}` starting at {start.start:g}", apply)


def _epsilon_plan(remedy: str, layers: list, value: float) -> TrialPlan:
    """Give the normalization layers built on the patched line the epsilon the patch
    writes: Keras's layers read it each time their call is traced."""
    normalizing = [layer for layer in layers if hasattr(layer, "epsilon")]
    if not normalizing:
        return TrialPlan(remedy, "", not_possible("the layers the patch changes were not found"))

    @contextmanager
    def apply() -> Iterator[None]:
        before = [layer.epsilon for layer in normalizing]
        for layer in normalizing:
            layer.epsilon = value
        try:
            yield
        finally:
            for layer, epsilon in zip(normalizing, before):
                layer.epsilon = epsilon

    names = ", ".join(f"`{layer.name}`" for layer in normalizing)
    return TrialPlan(remedy, f"epsilon={value:g} on {names}", apply)


def _learning_rate_plan(remedy: str, optimizer, name: str, value: float) -> TrialPlan:
    """Set the learning rate to `value`, or scale a schedule's output by it."""
    try:
        current = learning_rate_variable(optimizer)
    except AttributeError:  # not a Keras optimizer
        current = None
    if current is None:
        return TrialPlan(remedy, "", not_possible("the optimizer has no learning rate"))
    fixed = hasattr(current, "assign") and hasattr(current, "numpy")
    if fixed:
        # A fixed learning rate lives in a variable (a Keras variable wraps a tf.Variable):
        # it is set in place and restored with the rest of the saved state.
        was = float(current.numpy())
        lower = value if name == "learning_rate" else was * value

        @contextmanager
        def lower_value() -> Iterator[None]:
            current.assign(lower)
            try:
                yield
            finally:  # as it was, for the next plan made (a stronger one reads it)
                current.assign(was)

        return TrialPlan(remedy, f"learning rate {lower:.4g} (was {was:.4g})", lower_value)

    def scaled():
        if name == "learning_rate":  # a schedule the patch replaced by a number
            return tf.constant(value, tf.float32)
        if isinstance(current, keras.optimizers.schedules.LearningRateSchedule):
            return current(optimizer.iterations) * value
        return current() * value

    @contextmanager
    def lower_schedule() -> Iterator[None]:
        set_learning_rate_variable(optimizer, scaled)  # read while the step is traced
        try:
            yield
        finally:
            set_learning_rate_variable(optimizer, current)

    what = f"{value:.4g}" if name == "learning_rate" else f"multiplied by {value:g}"
    return TrialPlan(remedy, f"the learning-rate schedule {what}", lower_schedule)
