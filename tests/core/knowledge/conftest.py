"""Factories that build the knowledge base's inputs by hand, without TensorFlow."""

from __future__ import annotations

import pytest

from gradient_doctor.core.evidence import BadInput, Evidence, StepHistory, TrainingSetup
from gradient_doctor.core.findings import Origin, SourceLine, TensorStats
from gradient_doctor.core.gradient_paths import NON_DIFFERENTIABLE, OUTSIDE_TAPE, Node, PathBreak


def _stats(
    dtype: str = "float32",
    min: float | None = -3.1,
    max: float | None = 712.4,
    nan: int = 0,
    inf: int = 0,
    zeros: int = 0,
    size: int = 256,
    min_abs: float | None = None,
) -> TensorStats:
    return TensorStats(dtype, (32, 8), min, max, nan, inf, zeros, size=size, min_abs=min_abs)


def _evidence(
    op: str = "Exp",
    code: str | None = "w = tf.exp(scores)",
    phase: str | None = "forward",
    inputs: tuple[TensorStats, ...] | None = None,
    outputs: tuple[TensorStats, ...] | None = None,
    gradient_of: str | None = None,
    layer: str | None = "message_passing",
    step: int | None = 57,
    masked_by_select: bool = False,
    bad_inputs: tuple[BadInput, ...] = (),
    grad_norms: tuple[float | None, ...] = (),
    learning_rate: float | None = None,
    clipping: str | None = None,
    with_origin: bool = True,
    reproduced: bool = True,
    reduction_axis: int | None = -1,  # the exp of story 1 is normalised by its sum
    weights_upstream: bool | None = None,
    feeding_ops: frozenset[str] = frozenset(),
    nonfinite_constant: bool = False,
    framework: str = "tf",
) -> Evidence:
    origin = None
    if with_origin:
        origin = Origin(
            op=op,
            op_name=f"{layer}/{op}" if layer else op,
            layer=layer,
            source=SourceLine("train.py", 42, code) if code is not None else None,
            gradient_of=gradient_of,
            inputs=inputs if inputs is not None else (_stats(),),
            outputs=outputs if outputs is not None else (_stats(min=0.0, max=1.0, inf=17),),
        )
    history = StepHistory(
        steps=tuple(range(10, 10 + len(grad_norms))), grad_norms=tuple(grad_norms)
    )
    return Evidence(
        step=step,
        phase=phase,
        origin=origin,
        masked_by_select=masked_by_select,
        bad_inputs=bad_inputs,
        history=history,
        setup=TrainingSetup(learning_rate=learning_rate, clipping=clipping, framework=framework),
        reproduced=reproduced,
        reduction_axis=reduction_axis,
        weights_upstream=weights_upstream,
        feeding_ops=feeding_ops,
        nonfinite_constant=nonfinite_constant,
    )


def _break_evidence(
    kind: str = NON_DIFFERENTIABLE,
    op: str | None = "ArgMax",
    code: str | None = "generated_text = tf.argmax(gen_logits, axis=-1)",
    variables: tuple[str, ...] = ("generator/vocab_logits/kernel", "generator/vocab_logits/bias"),
    all_disconnected: bool = True,
    reentry: str | None = None,
    step: int | None = 0,
) -> Evidence:
    node = None
    if op is not None:
        node = Node(
            index=7,
            op_type=op,
            input_ids=(1,),
            output_ids=(2,),
            source=SourceLine("story4.py", 141, code) if code is not None else None,
            differentiable=kind != NON_DIFFERENTIABLE,
            recorded=kind != OUTSIDE_TAPE,
        )
    back = SourceLine("story4.py", 150, reentry) if reentry is not None else None
    return Evidence(
        step=step,
        phase=None,
        origin=None,
        path_break=PathBreak(kind, node, variables, back),
        all_disconnected=all_disconnected,
    )


@pytest.fixture
def make_break_evidence():
    """Build an `Evidence` of variables without gradients; defaults describe story 4's argmax."""
    return _break_evidence


@pytest.fixture
def make_stats():
    """Build a `TensorStats`; defaults describe a finite float32 tensor from -3.1 to 712.4."""
    return _stats


@pytest.fixture
def make_evidence():
    """Build an `Evidence` around one origin op; defaults describe an Exp overflow."""
    return _evidence


@pytest.fixture
def families():
    """Return the fix families of a diagnosis, in order."""
    return lambda diagnosis: [fix.family for fix in diagnosis.fixes]


@pytest.fixture
def not_fixes():
    """Return the not-fix remedies of a diagnosis, in order."""
    return lambda diagnosis: [item.remedy for item in diagnosis.not_fixes]
