"""Crash dumps: written in-process at a real tripped step, replayed, and refused when damaged."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from google.protobuf.message import DecodeError  # noqa: E402
from tensorflow.core.framework import graph_pb2  # noqa: E402

from gradient_doctor.cli.main import main  # noqa: E402
from gradient_doctor.cli.replay_command import comparison_line  # noqa: E402
from gradient_doctor.core.findings import Finding, Origin, SourceLine, TensorStats  # noqa: E402
from gradient_doctor.tf_adapter.dump import dump_format  # noqa: E402
from gradient_doctor.tf_adapter.dump.crash_dump import CrashDump  # noqa: E402
from gradient_doctor.tf_adapter.dump.dump_format import (  # noqa: E402
    DumpError,
    check_new_dump_directory,
    decode_array,
    encode_array,
)
from gradient_doctor.tf_adapter.dump.dump_replay import replay_dump  # noqa: E402
from gradient_doctor.tf_adapter.dump.step_graph import StepNotTraceable, trace_step  # noqa: E402
from gradient_doctor.tf_adapter.hooks.callback import Doctor  # noqa: E402
from gradient_doctor.tf_adapter.hooks.tape_hook import install_tape_hook  # noqa: E402
from gradient_doctor.tf_adapter.localize.step_context import StepCall  # noqa: E402
from gradient_doctor.tf_adapter.watcher import Watcher  # noqa: E402

EXP_LINE = "return tf.exp(scores)  # overflows on the growing rows"


class Exponential(keras.layers.Layer):
    def call(self, scores):
        return tf.exp(scores)  # overflows on the growing rows


class SeedStates(keras.callbacks.Callback):
    """Records the dropout seed generator's state as each batch begins."""

    def __init__(self, dropout):
        super().__init__()
        self.dropout = dropout
        self.states = []

    def on_train_batch_begin(self, batch, logs=None):
        self.states.append(self.dropout.seed_generator.state.numpy().copy())


class _Run:
    """One real fit whose seventh batch overflows, dumped by the watcher's hook."""

    def __init__(self, directory: Path):
        keras.utils.set_random_seed(5)
        rng = np.random.default_rng(5)
        growth = 1.0 + np.arange(256, dtype="float32")[:, None] / 16.0
        x = (rng.uniform(0.5, 1.5, (256, 6)) * growth).astype("float32")
        y = rng.normal(size=(256, 1)).astype("float32")
        self.dropout = keras.layers.Dropout(0.25)
        self.model = keras.Sequential(
            [
                keras.Input((6,)),
                keras.layers.Dense(4, kernel_initializer="ones"),
                Exponential(name="exponential"),
                keras.layers.BatchNormalization(),
                self.dropout,
                keras.layers.Dense(1),
            ]
        )
        self.model.compile(optimizer=keras.optimizers.Adam(1e-4), loss="mse")
        self.dump = CrashDump(directory, "inline.py")
        self.unchanged_by_dump = None
        self.watcher = Watcher(trial_steps=0, on_problem=self.on_problem)
        self.seeds = SeedStates(self.dropout)
        self.model.fit(
            x,
            y,
            batch_size=32,
            shuffle=False,
            verbose=0,
            callbacks=[self.seeds, Doctor(watcher=self.watcher)],
        )
        self.finding = self.watcher.problems[0]

    def on_problem(self, finding, evidence, call, named):
        variables = self.model.variables + self.model.optimizer.variables
        before = [np.array(v.numpy()) for v in variables]
        self.dump(finding, evidence, call, named)
        self.unchanged_by_dump = all(
            np.array_equal(b, v.numpy(), equal_nan=True) for b, v in zip(before, variables)
        )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return _Run(tmp_path_factory.mktemp("crash") / "dump")


@pytest.fixture
def damaged(run, tmp_path):
    """A fresh copy of the run's dump, to damage."""
    return Path(shutil.copytree(run.dump.directory, tmp_path / "copy"))


def test_the_run_finds_the_overflow_and_writes_one_dump(run):
    assert run.finding.category == "forward_overflow"
    assert run.finding.origin.source.code == EXP_LINE
    assert run.dump.written == run.dump.directory
    assert sorted(p.name for p in run.dump.directory.iterdir()) == [
        "batch.npz",
        "manifest.json",
        "step.json",
        "step.pb",
        "variables.npz",
    ]


def test_replay_names_the_same_origin_as_the_run(run):
    replayed = replay_dump(run.dump.directory)
    assert replayed.reproduced
    found, expected = replayed.finding, run.finding
    assert (found.category, found.step, found.phase) == (
        expected.category,
        expected.step,
        expected.phase,
    )
    assert found.origin.op == expected.origin.op == "Exp"
    assert found.origin.op_name == expected.origin.op_name
    assert found.origin.layer == expected.origin.layer
    # The same line; a replayed graph records no columns (its tracebacks have none).
    where = ("file", "line", "code", "end_line")
    assert [getattr(found.origin.source, key) for key in where] == [
        getattr(expected.origin.source, key) for key in where
    ]
    assert found.origin.inputs == expected.origin.inputs
    assert found.explanation == expected.explanation


def test_writing_the_dump_changes_no_variable(run):
    assert run.unchanged_by_dump is True


def test_the_seed_state_is_the_one_the_failing_step_started_from(run):
    step = json.loads((run.dump.directory / "step.json").read_text())
    with np.load(run.dump.directory / "variables.npz", allow_pickle=False) as arrays:
        seeds = [
            decode_array(arrays[v["key"]], v["dtype"])
            for v in step["variables"]
            if "seed_generator" in v["name"]
        ]
    assert len(seeds) == 1
    # The step advanced the live state already; the dump holds it stepped back.
    failing = run.finding.step
    np.testing.assert_array_equal(seeds[0], run.seeds.states[failing])
    assert not np.array_equal(seeds[0], run.dropout.seed_generator.state.numpy())


def test_the_optimizer_state_is_saved_beside_the_step(run):
    step = json.loads((run.dump.directory / "step.json").read_text())
    optimizer = {v["name"] for v in step["variables"] if v["role"] == "optimizer"}
    assert any("iteration" in name for name in optimizer)
    # Adam keeps a momentum and a velocity per trainable weight.
    assert sum("momentum" in name for name in optimizer) == len(run.model.trainable_weights)
    assert sum("velocity" in name for name in optimizer) == len(run.model.trainable_weights)


def test_every_file_is_a_safe_format_the_manifest_fingerprints(run):
    folder = run.dump.directory
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["format"] == "gradient-doctor/dump"
    assert manifest["version"] == dump_format.VERSION
    assert set(manifest["versions"]) == {
        "gradient_doctor",
        "tensorflow",
        "keras",
        "numpy",
        "python",
    }
    assert manifest["finding"]["origin"]["code"] == EXP_LINE
    for name, entry in manifest["files"].items():
        data = (folder / name).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry["holds"]
    for name in ("variables.npz", "batch.npz"):
        with np.load(folder / name, allow_pickle=False) as arrays:
            assert all(not arrays[key].dtype.hasobject for key in arrays.files)
    graph = graph_pb2.GraphDef()
    graph.ParseFromString((folder / "step.pb").read_bytes())
    assert "Exp" in {node.op for node in graph.node}
    # Optimizer updates are not part of the step, as in the run's replay.
    assert not {"AssignSubVariableOp", "ResourceApplyAdam"} & {node.op for node in graph.node}


def test_replay_never_changes_the_dump(run):
    def fingerprint():
        return {p.name: p.read_bytes() for p in run.dump.directory.iterdir()}

    before = fingerprint()
    replay_dump(run.dump.directory)
    assert fingerprint() == before


def _replay(capsys, folder) -> tuple[int, str]:
    status = main(["replay", str(folder)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return status, err


def test_a_truncated_npz_is_refused(damaged, capsys):
    data = (damaged / "variables.npz").read_bytes()
    (damaged / "variables.npz").write_bytes(data[: len(data) // 2])
    status, err = _replay(capsys, damaged)
    assert status == 2
    assert "variables.npz is corrupted" in err
    assert "truncated" in err


def test_a_dump_of_another_format_version_is_refused(damaged, capsys):
    manifest = json.loads((damaged / "manifest.json").read_text())
    manifest["version"] = 99
    (damaged / "manifest.json").write_text(json.dumps(manifest))
    status, err = _replay(capsys, damaged)
    assert status == 2
    assert "version 99 dump" in err
    assert f"reads version {dump_format.VERSION} only" in err


def test_a_missing_file_is_refused(damaged, capsys):
    (damaged / "batch.npz").unlink()
    status, err = _replay(capsys, damaged)
    assert status == 2
    assert "batch.npz is missing" in err


def test_garbage_graph_bytes_are_refused(damaged, capsys):
    size = (damaged / "step.pb").stat().st_size
    (damaged / "step.pb").write_bytes(np.random.default_rng(0).bytes(size))
    status, err = _replay(capsys, damaged)
    assert status == 2
    assert "step.pb is corrupted" in err


def _resign(folder: Path, name: str) -> None:
    """Record a file's new checksum, as if the dump had been written that way."""
    manifest = json.loads((folder / "manifest.json").read_text())
    data = (folder / name).read_bytes()
    manifest["files"][name].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_garbage_graph_bytes_with_a_matching_checksum_are_still_refused(damaged, capsys):
    with pytest.raises(DecodeError):
        graph_pb2.GraphDef().ParseFromString(b"\xff" * 64)
    (damaged / "step.pb").write_bytes(b"\xff" * 64)
    _resign(damaged, "step.pb")
    status, err = _replay(capsys, damaged)
    assert status == 2
    assert "step.pb is not a GraphDef" in err


def test_a_pickled_array_is_never_loaded(damaged, capsys):
    np.savez(damaged / "batch.npz", batch_0=np.array([{"evil": 1}], dtype=object))
    _resign(damaged, "batch.npz")
    status, err = _replay(capsys, damaged)
    assert status == 2
    assert "batch.npz is corrupted: NumPy cannot read it" in err


def test_a_folder_that_is_not_a_dump_is_refused(tmp_path, capsys):
    status, err = _replay(capsys, tmp_path)
    assert status == 2
    assert "has no manifest.json, so it is not a crash dump" in err
    status, err = _replay(capsys, tmp_path / "nowhere")
    assert status == 2
    assert "no such folder" in err


def test_a_dump_is_never_written_over_files(tmp_path):
    check_new_dump_directory(tmp_path / "new")
    check_new_dump_directory(tmp_path)  # empty
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(DumpError, match="already holds other files.*never overwrites"):
        check_new_dump_directory(tmp_path)
    with pytest.raises(DumpError, match="it is a file"):
        check_new_dump_directory(tmp_path / "notes.txt")
    with pytest.raises(DumpError, match="already holds other files"):
        dump_format.write_dump(tmp_path, {}, b"", {}, {}, {})
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_arrays_numpy_cannot_name_round_trip_and_objects_are_refused():
    values = tf.constant([1.5, -2.25, float("inf")], tf.bfloat16).numpy()
    stored, dtype = encode_array(values)
    assert (stored.dtype, dtype) == (np.uint16, "bfloat16")
    np.testing.assert_array_equal(decode_array(stored, dtype), values)
    with pytest.raises(DumpError, match="Python objects"):
        encode_array(np.array([object()], dtype=object))


def test_a_step_that_calls_python_cannot_be_dumped():
    def train_step(x):
        return tf.py_function(lambda v: v * 2.0, [x], tf.float32)

    with pytest.raises(StepNotTraceable, match="calls back into Python"):
        trace_step(StepCall(train_step, (tf.ones([2]),)))


def test_a_step_that_stays_finite_is_said_not_to_reproduce(run, damaged, capsys):
    step = json.loads((damaged / "step.json").read_text())
    name = run.model.layers[0].kernel.path  # "sequential/dense/kernel" in a fresh process
    (kernel,) = [v for v in step["variables"] if v["name"] == name]
    with np.load(damaged / "variables.npz", allow_pickle=False) as stored:
        arrays = {key: stored[key] for key in stored.files}
    arrays[kernel["key"]] = np.zeros_like(arrays[kernel["key"]])  # scores 0: exp stays 1
    np.savez(damaged / "variables.npz", **arrays)
    _resign(damaged, "variables.npz")
    status, err = _replay(capsys, damaged)
    assert status == 0
    assert "the problem did not reproduce from this dump" in err
    assert "the run found forward_overflow (Exp at " in err


def test_the_comparison_names_both_places_when_they_differ():
    source = SourceLine("train.py", 5, "w = tf.exp(s)")
    finding = Finding(
        "forward_overflow", 3, "forward", Origin("Exp", "l/Exp", "l", source, None, (), ()), "."
    )
    same = {"category": "forward_overflow", "origin": {"op": "Exp", "file": "train.py", "line": 5}}
    assert comparison_line(same, finding, True) == (
        "Reproduced: the replay finds what the run found, forward_overflow (Exp at train.py:5)."
    )
    moved = {"category": "forward_domain", "origin": {"op": "Log", "file": "train.py", "line": 9}}
    assert comparison_line(moved, finding, True) == (
        "Reproduced, but the replay finds forward_overflow (Exp at train.py:5) "
        "where the run found forward_domain (Log at train.py:9)."
    )


def test_the_comparison_says_when_the_same_op_failed_from_other_values():
    source = SourceLine("train.py", 5, "w = tf.exp(s)")
    replayed = TensorStats("float32", (4,), -2.0, 95.0, 0, 0, 0)
    origin = Origin("Exp", "l/Exp", "l", source, None, (replayed,), ())
    finding = Finding("forward_overflow", 3, "forward", origin, ".")
    ran = {"dtype": "float32", "min": -2.0000001, "max": 95.00001, "nan": 0, "inf": 0}
    dumped = {
        "category": "forward_overflow",
        "origin": {"op": "Exp", "file": "train.py", "line": 5, "inputs": [ran]},
    }
    assert comparison_line(dumped, finding, True, "PyTorch") == (
        "Reproduced: the replay finds what the run found, forward_overflow (Exp at train.py:5)."
    )
    dumped["origin"]["inputs"] = [{**ran, "max": 120.0}]
    assert comparison_line(dumped, finding, True, "PyTorch") == (
        "Reproduced: the replay finds what the run found, forward_overflow (Exp at "
        "train.py:5), but from other values: input 0's max was 120 in the run, 95 in the "
        "replay. A random draw the dump could not restore, or a different PyTorch build or "
        "device, computed them."
    )


def test_tensor_control_flow_and_nested_functions_trace_into_one_graph():
    install_tape_hook()
    keras.utils.set_random_seed(0)
    layer = keras.layers.Dense(2)
    layer.build((None, 3))

    @tf.function
    def length(v):
        return tf.norm(v, axis=-1)  # a nested tf.function

    def step(x):
        with tf.GradientTape() as tape:
            h = layer(x)
            if tf.reduce_sum(h) > 0:  # Python control flow on a tensor: needs AutoGraph
                h = -h
            loss = tf.reduce_mean(length(h))
        return tape.gradient(loss, layer.trainable_variables)

    x = tf.ones([4, 3])
    traced = trace_step(StepCall(step, (x,)), [("x", x)])
    notes = {note.name: note for note in traced.ops}
    (sqrt,) = [n for n in traced.ops if n.op_type == "Sqrt"]
    assert sqrt.phase == "forward"
    assert sqrt.source.code == "return tf.norm(v, axis=-1)  # a nested tf.function"
    (gradient,) = [n for n in traced.ops if n.op_type == "SqrtGrad"]
    assert (gradient.phase, gradient.gradient_of) == ("backward", "Sqrt")
    assert notes[gradient.forward] == sqrt
    assert gradient.source == sqrt.source
    assert any(n.op_type in ("If", "StatelessIf") for n in traced.ops)
    assert [(name, value.shape) for _, value, name in traced.batch] == [("x", (4, 3))]
    assert sorted(v.name.split(":")[0].split("/")[-1] for _, v in traced.variables) == [
        "bias",
        "kernel",
    ]
