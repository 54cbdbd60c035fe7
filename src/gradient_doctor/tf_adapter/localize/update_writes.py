"""Name the optimizer's own update as the writer of the non-finite weights a failing step read.

The guard checks what goes into each update, the loss and the gradients; an update
whose own arithmetic overflows (Adam squaring a gradient past float16's 65504 into
its `velocity`) still runs, and writes inf or NaN. The next step then reads
non-finite weights that no op of it made (`broken_state`). When no call of the
user's wrote them and the optimizers train them, the last update that ran did: the
step before read them finite, since its loss and gradients were. This gathers the
evidence for it after the failure, at no cost per step: what the weights and the
optimizers' slots hold, the dtype policy they were built under and the line that set
it, and (`update_replay`) which update first left them non-finite, and with what.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

from gradient_doctor.core.evidence import BrokenState, Evidence, StateValues, UpdateOverflow
from gradient_doctor.core.findings import OPTIMIZER_CREATION, Origin
from gradient_doctor.tf_adapter.hooks.creation_sites import (
    creation_line,
    layer_of_variable,
    variable_path,
)
from gradient_doctor.tf_adapter.localize.dtype_policy import global_policy, policy_site
from gradient_doctor.tf_adapter.localize.optimizer_state import (
    nonfinite_values,
    state_variables,
)
from gradient_doctor.tf_adapter.localize.step_context import StepCall
from gradient_doctor.tf_adapter.localize.update_replay import ReplayedUpdates, replay_updates
from gradient_doctor.tf_adapter.step import loss_scale


def with_update_overflow(
    evidence: Evidence,
    optimizers: list,
    call: StepCall | None,
    guard,
    snapshots,
    more_batches=None,
) -> Evidence:
    """`evidence` with the optimizer's update named as the writer of its broken state,
    when no call of the user's wrote it and the optimizers train it; else unchanged.

    The step becomes the one whose update first wrote a non-finite value (when a replay
    left the weights as the run's, bit for bit, so that its steps are the run's; else
    the last update before the failing step, which wrote what that step read), and the
    origin the op that did (the square of a gradient, when that replay showed it
    overflow), placed at the optimizer's line.
    """
    state = evidence.broken_state
    failing = evidence.step
    if state is None or state.written_by is not None or not failing or not optimizers:
        return evidence
    weights, slots = state_variables(optimizers)
    if not any(variable_path(w) in state.variables for w in weights):
        return evidence
    nonfinite = nonfinite_values(weights, slots)
    broken_weights = tuple(v for v in nonfinite if v.weight is None and _is_weight(v, weights))
    broken_slots = tuple(v for v in nonfinite if v not in broken_weights)
    if not broken_weights:
        return evidence
    replayed = None
    if call is not None and snapshots is not None:
        try:
            replayed = replay_updates(
                call,
                failing,
                weights,
                slots,
                guard,
                snapshots,
                more_batches,
                optimizers,
                evidence.setup.xla,
            )
        except Exception as error:  # the evidence stands without the replay
            warnings.warn(
                f"gradient-doctor could not replay the updates before step {failing} "
                f"({type(error).__name__}: {error}); the update that wrote the NaN is named "
                "without them.",
                stacklevel=2,
            )
    writer = _writer(optimizers, state)
    optimizer = loss_scale.inner_optimizer(writer)
    policy = global_policy(broken_weights[0].dtype)
    overflow = UpdateOverflow(
        optimizer=type(optimizer).__name__,
        read_at=failing,
        written_at=_written_at(failing, replayed),
        weights=broken_weights,
        state=broken_slots,
        policy=policy,
        policy_site=policy_site(policy) if policy is not None else None,
        replayed_from=replayed.start if replayed is not None else None,
        first_step=replayed.first_step if replayed is not None else None,
        first_state=replayed.first_state if replayed is not None else (),
        weights_step=replayed.weights_step if replayed is not None else None,
        gradients=replayed.gradients if replayed is not None else (),
        replayed_on=replayed.replayed_on if replayed is not None else None,
        reproduced=replayed is not None and replayed.reproduced,
    )
    site = creation_line(optimizer) or creation_line(writer)
    origin = _origin(evidence.origin, overflow, replayed, state, weights, site)
    step = overflow.first_step if overflow.reproduced else overflow.written_at
    return replace(evidence, step=step, phase=None, origin=origin, update_overflow=overflow)


def _writer(optimizers: list, state: BrokenState):
    """The optimizer that trains the broken weights (a GAN has two), else the latest."""
    for optimizer in optimizers:
        weights, _ = state_variables([optimizer])
        if any(variable_path(w) in state.variables for w in weights):
            return optimizer
    return optimizers[-1]


def _written_at(failing: int, replayed: ReplayedUpdates | None) -> int:
    """The step whose update wrote the weights the failing step read non-finite: the
    replay's, when its steps are the run's; else the last one before it."""
    if replayed is not None and replayed.reproduced and replayed.weights_step is not None:
        return replayed.weights_step
    return failing - 1


def _is_weight(values: StateValues, weights: list) -> bool:
    return any(variable_path(w) == values.name for w in weights)


def _origin(
    read: Origin | None,
    overflow: UpdateOverflow,
    replayed: ReplayedUpdates | None,
    state: BrokenState,
    weights: list,
    site,
) -> Origin | None:
    """The square that overflowed (of the largest gradient whose square did), when a
    replay on the run's own batches showed it;
    else the op of the failing step that read the weights, placed at the optimizer's
    line (the object whose update wrote them)."""
    overflowed = [i for i, g in enumerate(overflow.gradients) if g.inf]
    squared = max(overflowed, key=lambda i: overflow.gradients[i].largest or 0.0, default=None)
    if overflow.reproduced and squared is not None and replayed is not None:
        name = overflow.gradients[squared].name
        gradient, square = replayed.squares[squared]
        weight = next((w for w in weights if variable_path(w) == name), None)
        layer = layer_of_variable(weight) if weight is not None else None
        return Origin(
            op="Square",
            op_name=f"{overflow.optimizer.lower()}/update/{name}/Square",
            layer=getattr(layer, "path", None),
            source=site,
            gradient_of=None,
            inputs=(gradient,),
            outputs=(square,),
            source_kind=OPTIMIZER_CREATION if site is not None else "op",
            variable=name,
        )
    if read is None:
        return None
    if site is None:
        return read
    return replace(read, source=site, source_kind=OPTIMIZER_CREATION, variable=state.variables[0])
