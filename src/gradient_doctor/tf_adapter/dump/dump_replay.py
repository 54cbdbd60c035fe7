"""`gradient-doctor replay DIR`: run a crash dump's step again and diagnose it, without the script.

The dump's graph runs once in a session of its own, from the saved last good
state and the failing batch, with every tensor fetched. Its ops become the same
framework-neutral trace the run's own replay makes (`OpEvent`s in creation
order, with each op's layer, line and pass as noted when the step was traced),
so the same walk (`core.origin_search`) and the same knowledge base name the
origin and explain it.
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf
from google.protobuf.message import DecodeError
from tensorflow.core.framework import graph_pb2

from gradient_doctor.core.crash_dump import DumpReplay, restored_context
from gradient_doctor.core.findings import SourceLine, TensorStats
from gradient_doctor.core.pipeline import diagnosed
from gradient_doctor.tf_adapter.dump.dump_format import STEP, DumpError, decode_array, read_dump
from gradient_doctor.tf_adapter.dump.step_session import SessionRun, run_step_graph
from gradient_doctor.tf_adapter.localize import input_scan
from gradient_doctor.tf_adapter.localize.replay import (
    ReplayResult,
    first_nonfinite,
    replayed_event,
)
from gradient_doctor.tf_adapter.localize.step_origin import evidence_from_replay
from gradient_doctor.tf_adapter.step.tensor_summary import summarize


def replay_dump(directory: str | os.PathLike[str]) -> DumpReplay:
    """Replay the dump in `directory` and diagnose the step. The folder is only read.

    Raises:
        DumpError: the dump is missing, incomplete, corrupted, of another format
            version, or cannot run with this TensorFlow.
    """
    files = read_dump(directory)
    manifest, step = files.manifest, files.step
    graph_def = graph_pb2.GraphDef()
    try:
        graph_def.ParseFromString(files.graph)
    except DecodeError as error:
        raise DumpError(
            _unreadable(files.directory, f"step.pb is not a GraphDef ({error})")
        ) from None
    try:
        variables = _arrays(step["variables"], files.variables, bound_only=True)
        feeds = _arrays(step["batch"], files.batch)
        feeds.update(_arrays(step["constants"], files.batch))
        ops = step["ops"]
        updates = [list(update["gradients"]) for update in step["updates"]]
        losses = list(step["losses"])
        sources = [SourceLine(**source) for source in step["sources"]]
    except (KeyError, TypeError, ValueError) as error:
        raise DumpError(_unreadable(files.directory, f"{STEP} lacks {error}")) from None
    wanted = [name for update in updates for name in update if name] + losses
    try:
        run = run_step_graph(graph_def, variables, feeds, [op["name"] for op in ops], wanted)
    except (ValueError, KeyError, TypeError, tf.errors.OpError) as error:
        written = (manifest.get("versions") or {}).get("tensorflow", "an unknown version")
        raise DumpError(
            f"cannot replay {str(files.directory)!r}: TensorFlow {tf.__version__} cannot load "
            f"the step written with TensorFlow {written} ({type(error).__name__}: "
            f"{_first_line(error)}). Replay it with the TensorFlow version that wrote it."
        ) from None
    if run.error is not None:
        raise DumpError(
            f"cannot replay {str(files.directory)!r}: the step raised "
            f"{type(run.error).__name__} when run again ({_first_line(run.error)})."
        )
    result, ids = _replay_result(ops, sources, run, updates, losses)
    data_ids = frozenset(ids[e["placeholder"]] for e in step["batch"] if e["placeholder"] in ids)
    history, setup = restored_context(manifest)
    named = [(entry["name"], tf.constant(feeds[entry["placeholder"]])) for entry in step["batch"]]
    evidence = evidence_from_replay(
        result,
        manifest.get("step"),
        input_scan.scan(named),
        history,
        setup,
        data_ids,
    )
    return DumpReplay(manifest, diagnosed(evidence), result.reproduced)


def _arrays(entries: list[dict], arrays: dict[str, np.ndarray], bound_only=False) -> dict:
    """Placeholder name -> value for each entry (only those bound to a placeholder)."""
    found = {}
    for entry in entries:
        if bound_only and entry["placeholder"] is None:
            continue  # an optimizer's variable: state for later, not read by the step
        if entry["key"] not in arrays:
            raise KeyError(f"the array {entry['key']!r}")
        found[entry["placeholder"]] = decode_array(arrays[entry["key"]], entry["dtype"])
    return found


def _replay_result(
    ops: list[dict], sources: list[SourceLine], run: SessionRun, updates: list, losses: list
) -> tuple[ReplayResult, dict[str, int]]:
    """The session's values as the trace an eager replay records: one event per op.

    Returns:
        The trace, and the id given to each tensor name in it.
    """
    ids: dict[str, int] = {}
    tensors: dict[int, object] = {}
    stats: dict[int, TensorStats | None] = {}

    def tracked(name: str) -> tuple[int, TensorStats | None]:
        if name not in ids:
            key = ids[name] = len(ids)
            value = run.values.get(name)
            tensors[key] = value
            stats[key] = None if value is None else summarize(value)
        return ids[name], stats[ids[name]]

    index_of = {op["name"]: index for index, op in enumerate(ops)}
    events = []
    for index, op in enumerate(ops):
        inputs, outputs = run.ops[op["name"]]
        input_ids = tuple(tracked(name)[0] for name in inputs)
        output_ids = tuple(tracked(name)[0] for name in outputs)
        events.append(
            replayed_event(
                index,
                op["type"],
                op["layer"],
                op["phase"] == "backward",
                op["gradient_of"],
                index_of.get(op["forward"]),
                input_ids,
                output_ids,
                stats,
                None if op["source"] is None else sources[op["source"]],
            )
        )
    applies = [(gradients, [], []) for gradients in updates]
    bad_ids = first_nonfinite(applies, losses, tracked)
    return ReplayResult(events, bad_ids, tensors, stats, [], None, {}), ids


def _unreadable(folder, why: str) -> str:
    return (
        f"cannot replay {str(folder)!r}: {why}. Copy the dump again from where it was "
        "written, or dump the run again."
    )


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
