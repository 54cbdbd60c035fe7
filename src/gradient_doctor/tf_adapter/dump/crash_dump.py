"""`--dump DIR`: at the first non-finite step, save what replays it anywhere, without the script.

The guard skipped the failing update, so the variables still hold the last good
state. The dump keeps that state, the failing batch and the step itself as a
standalone graph (see `step_graph`), with the finding as the JSON report has it.
`gradient-doctor replay DIR` runs it again (see `dump_replay`).
"""

from __future__ import annotations

import dataclasses
import platform
from pathlib import Path
from typing import Any

import numpy as np

from gradient_doctor.core.crash_dump import DumpTarget, dump_manifest
from gradient_doctor.core.evidence import Evidence
from gradient_doctor.core.findings import Finding, SourceLine
from gradient_doctor.tf_adapter._tf_internals import variable_handle
from gradient_doctor.tf_adapter.dump import dump_format
from gradient_doctor.tf_adapter.dump.dump_format import encode_array
from gradient_doctor.tf_adapter.dump.step_graph import StepNotTraceable, TracedStep, trace_step
from gradient_doctor.tf_adapter.dump.step_session import run_step_graph
from gradient_doctor.tf_adapter.localize.missing_gradients import variable_name
from gradient_doctor.tf_adapter.localize.step_context import StepCall


class CrashDump(DumpTarget):
    """The watcher's `on_problem` hook: writes one dump, at the first finding it can (the
    folder and script as `DumpTarget` takes them)."""

    def __call__(
        self,
        finding: Finding,
        evidence: Evidence,
        call: StepCall | None,
        named_inputs: list[tuple[str, object]],
    ) -> None:
        self.asked = True
        if self.written is not None:
            return
        if call is None:
            self.warn(
                "the failing step cannot be run again (its batch was not kept, or the "
                "update is made in the training loop's own body rather than a step function)"
            )
            return
        self.attempt(
            finding.step,
            lambda: write_crash_dump(
                self.directory, finding, evidence, call, named_inputs, self.script
            ),
            expected=(StepNotTraceable,),
        )


def write_crash_dump(
    directory,
    finding: Finding,
    evidence: Evidence,
    call: StepCall,
    named_inputs: list[tuple[str, object]],
    script: str | None = None,
) -> Path:
    """Trace the failing step, read the last good state, and write the dump.

    Only reads the user's variables; the graph runs (once, to find the integer
    state the step advances) on copies in a session of its own.

    Returns:
        The dump folder.

    Raises:
        StepNotTraceable: the step cannot become a standalone graph.
        DumpError: the folder holds files.
        OSError: the files cannot be written.
    """
    traced = trace_step(call, named_inputs)
    graph_def = traced.graph.as_graph_def()
    variables = {placeholder: _value(v) for placeholder, v in traced.variables}
    feeds = {placeholder: value for placeholder, value, _ in traced.batch}
    feeds.update(traced.constants)
    variables, rewound = _rewind_integer_state(graph_def, variables, feeds)
    step, variable_arrays, batch_arrays = _describe(traced, variables, rewound)
    manifest = dump_manifest("tensorflow", versions(), finding, _problem(finding), evidence, script)
    return dump_format.write_dump(
        directory,
        manifest,
        graph_def.SerializeToString(),
        step,
        variable_arrays,
        batch_arrays,
    )


def versions() -> dict[str, str]:
    """The versions a dump's reader may need to know about."""
    import keras
    import tensorflow as tf

    from gradient_doctor import __version__

    return {
        "gradient_doctor": __version__,
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def _problem(finding: Finding) -> dict[str, Any]:
    from gradient_doctor.render.json_report import problem_to_dict

    return problem_to_dict(finding)


def _value(variable) -> np.ndarray:
    return np.array(variable.numpy())  # a copy: the user's variable is only read


def _rewind_integer_state(graph_def, variables: dict, feeds: dict) -> tuple[dict, list[str]]:
    """Step back the integer state (seed generators) the failing step already advanced.

    As the run's own replay does: run the step once on copies, see by how much
    each integer variable moved, and take that off, so a replay draws the same
    dropout masks and random numbers as the step that failed.
    """
    run = run_step_graph(graph_def, variables, feeds)
    if run.error is not None:
        return variables, []
    rewound = {}
    for name, before in variables.items():
        if before.dtype.kind in "iu" and not np.array_equal(run.variables_after[name], before):
            rewound[name] = before - (run.variables_after[name] - before)
    return {**variables, **rewound}, sorted(rewound)


def _describe(
    traced: TracedStep, variables: dict[str, np.ndarray], rewound: list[str]
) -> tuple[dict, dict, dict]:
    """The JSON description of the step, and the arrays of the two npz files by key."""
    sources: list[SourceLine] = []
    source_index: dict[SourceLine, int] = {}

    def index_of(source: SourceLine | None) -> int | None:
        if source is None:
            return None
        if source not in source_index:
            source_index[source] = len(sources)
            sources.append(source)
        return source_index[source]

    variable_arrays, batch_arrays = {}, {}

    def entry(arrays: dict, key: str, value, **fields) -> dict:
        arrays[key], dtype = encode_array(value)
        return {"key": key, "dtype": dtype, "shape": list(np.shape(value)), **fields}

    step_variables = [
        entry(
            variable_arrays,
            f"variable_{n}",
            variables[placeholder],
            placeholder=placeholder,
            name=variable_name(variable),
            role="step",
            rewound=placeholder in rewound,
        )
        for n, (placeholder, variable) in enumerate(traced.variables)
    ]
    read = {id(handle) for _, v in traced.variables if (handle := variable_handle(v)) is not None}
    optimizer_variables = [
        entry(
            variable_arrays,
            f"optimizer_{n}",
            _value(variable),
            placeholder=None,
            name=variable_name(variable),
            role="optimizer",
        )
        for n, variable in enumerate(
            v for optimizer in traced.optimizers for v in optimizer.variables
        )
        if variable_handle(variable) is None or id(variable_handle(variable)) not in read
    ]
    step = {
        "ops": [
            {
                "name": note.name,
                "type": note.op_type,
                "layer": note.layer,
                "phase": note.phase,
                "gradient_of": note.gradient_of,
                "forward": note.forward,
                "source": index_of(note.source),
            }
            for note in traced.ops
        ],
        "sources": [dataclasses.asdict(source) for source in sources],
        "updates": [
            {"gradients": list(update.gradients), "variables": list(update.variables)}
            for update in traced.updates
        ],
        "losses": list(traced.losses),
        "batch": [
            entry(batch_arrays, f"batch_{n}", value, placeholder=placeholder, name=name)
            for n, (placeholder, value, name) in enumerate(traced.batch)
        ],
        "constants": [
            entry(batch_arrays, f"constant_{n}", value, placeholder=placeholder)
            for n, (placeholder, value) in enumerate(traced.constants)
        ],
        "variables": step_variables + optimizer_variables,
    }
    return step, variable_arrays, batch_arrays
