"""Find the function of the user's input pipeline that wrote a batch's non-finite values.

A batch that already holds NaN says only that the data did. Often the data is made by
the user's own `tf.data` pipeline: `dataset.map(standardise)`, a scaling per window
that divides by its standard deviation, which is 0 for a flat window. For each pipeline
in reach (the dataset `fit` was given, and the datasets the user's frames hold), each
function it maps is checked, source first, over the elements it reads, by a pass of
`tf.data` itself (compiled, not element by element in Python): the first element that
is finite and that the function turns non-finite is replayed through the function
eagerly, op by op, as a failing step is, and the first op that wrote a non-finite value
is its origin.
"""

from __future__ import annotations

import sys
import time

import tensorflow as tf

from gradient_doctor.core.evidence import PipelineOrigin
from gradient_doctor.core.origin_search import trace_evidence
from gradient_doctor.core.source_frames import user_frame_values
from gradient_doctor.tf_adapter._tf_internals import mapped_functions
from gradient_doctor.tf_adapter.localize.reductions import TensorflowReductions
from gradient_doctor.tf_adapter.localize.replay import replay_step
from gradient_doctor.tf_adapter.localize.step_context import StepCall
from gradient_doctor.tf_adapter.localize.step_origin import WEIGHT_READS
from gradient_doctor.tf_adapter.step.tensor_summary import sample_values

# The most elements of one function's input checked, and the time all checks may take
# (a pipeline that decodes images could take long to read whole).
MAX_ELEMENTS = 100_000
SCAN_SECONDS = 10.0
# Elements checked per batch of verdicts read back (the time is looked at in between).
_VERDICTS_PER_READ = 256


def pipeline_origin(datasets: list) -> PipelineOrigin | None:
    """The first mapped function of `datasets`' pipelines that turns a finite element
    non-finite, replayed on that element; None when none does (the source data itself
    held the values, or no pipeline is in reach)."""
    deadline = time.monotonic() + SCAN_SECONDS
    for dataset in datasets:
        for reads, function in mapped_functions(dataset):
            found = _first_turned(reads, function, deadline)
            if found is None:
                continue
            index, element = found
            origin = _replayed(function, element, index)
            if origin is not None:
                return origin
    return None


def datasets_in_reach(fit_data=None) -> list:
    """The `tf.data.Dataset`s a failing batch may have come from: the one `fit` was
    given, then those the user's frames on the stack hold (innermost first, their
    locals then their globals), each once."""
    found = [fit_data] if isinstance(fit_data, tf.data.Dataset) else []
    found += [v for v in user_frame_values(sys._getframe(1)) if isinstance(v, tf.data.Dataset)]
    unique = {id(dataset): dataset for dataset in reversed(found)}
    return [dataset for dataset in found if unique.pop(id(dataset), None) is not None]


def _first_turned(reads, function, deadline: float) -> tuple[int, object] | None:
    """(index, element) of the first element of `reads` that is finite and that
    `function` turns non-finite, or None (none is, or none was found by `deadline`).

    The verdicts are read back in batches, the time looked at in between; once one
    says an element was turned, a second pass keeps that element (a pipeline that
    reshuffles may order it elsewhere: the first turned one of that pass is kept)."""

    def verdict(index, element):
        made = function(*_arguments(element))
        return index, element, _finite(element) & ~_finite(made)

    try:
        verdicts = (
            reads.take(MAX_ELEMENTS)
            .enumerate()
            .map(verdict)
            .map(lambda index, element, turned: turned)
            .batch(_VERDICTS_PER_READ)
        )
        for turned in verdicts:
            if bool(tf.reduce_any(turned)):
                break
            if time.monotonic() > deadline:
                return None
        else:
            return None
        kept = reads.take(MAX_ELEMENTS).enumerate().map(verdict)
        for index, element, _ in kept.filter(lambda index, element, turned: turned).take(1):
            return int(index), element
    except (tf.errors.OpError, TypeError, ValueError):  # a function that will not run apart
        return None
    return None


def _replayed(function, element, index: int) -> PipelineOrigin | None:
    """`function` run again on `element`, op by op, from what it returns back to the
    first op that wrote a non-finite value; None when it returned nothing non-finite."""
    arguments = _arguments(element)
    made = []
    result = replay_step(StepCall(lambda *args: made.append(function(*args)), arguments), ran=False)
    bad_ids = [
        id(t)
        for t in tf.nest.flatten(made)
        if isinstance(t, tf.Tensor) and t.dtype.is_floating and not bool(_finite(t))
    ]
    if not bad_ids:
        return None
    traced = trace_evidence(
        result.events,
        bad_ids,
        None,
        frozenset(id(t) for t in tf.nest.flatten(arguments)),
        WEIGHT_READS,  # a function of the pipeline may read a variable
        result.stats,
        input_values=lambda event: tuple(sample_values(result.tensors[i]) for i in event.input_ids),
        reductions=TensorflowReductions(result.tensors),
    )
    if traced.evidence.origin is None:
        return None
    name = getattr(function, "__name__", "<function>")
    element = f"element {index} of what it reads (the first it turns non-finite)"
    return PipelineOrigin(f"`map({name})`", element, traced.evidence)


def _arguments(element) -> tuple:
    """The arguments `map` calls its function with: a tuple element unpacked."""
    return tuple(element) if isinstance(element, tuple) else (element,)


def _finite(structure) -> tf.Tensor:
    """Whether every floating-point tensor of `structure` is finite (True without one)."""
    checks = [
        tf.reduce_all(tf.math.is_finite(t))
        for t in tf.nest.flatten(structure)
        if isinstance(t, tf.Tensor) and t.dtype.is_floating
    ]
    return tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True)
