"""A recorded step's op events walked to the origin: one way for the seeded rerun's step
and a crash dump's replay alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from gradient_doctor.core.evidence import Evidence, StepHistory, TrainingSetup
from gradient_doctor.core.findings import TensorStats
from gradient_doctor.core.op_trace import OpEvent
from gradient_doctor.core.origin_search import trace_evidence
from gradient_doctor.torch_adapter.localize.op_recorder import (
    READ_VARIABLE,
    made_before,
    parameter_values,
)
from gradient_doctor.torch_adapter.localize.reductions import TorchReductions


def recorded_evidence(
    events: Sequence[OpEvent],
    bad_ids: Sequence[int],
    stats: Mapping[int, TensorStats],
    step: int,
    history: StepHistory,
    setup: TrainingSetup,
) -> Evidence:
    """The evidence of a step recorded op by op: the walk from its non-finite losses and
    gradients (`bad_ids`) to the first op that made a non-finite value; the tensors no
    op made and no parameter read are what the step was fed (`made_before`).

    Args:
        events: the step's events, in the order its ops ran.
        bad_ids: the ids of its non-finite losses and gradients (none: it stayed finite).
        stats: each tensor value's summary, by id.
        step: the step's number.
        history, setup: the run's recent history and training setup.
    """
    events = list(events)
    traced = trace_evidence(
        events,
        list(bad_ids),
        step,
        data_ids=made_before(events),
        weight_reads=frozenset({READ_VARIABLE}),
        stats=stats,
        reductions=TorchReductions(),
        variable_values=parameter_values(events),
    )
    return replace(traced.evidence, history=history, setup=setup, reproduced=bool(bad_ids))
