"""The PyTorch crash dump on a step recorded in this process: JSON and safetensors only,
replayed op by op from its leaves, bounded in size, and honest about what it lacks."""

from __future__ import annotations

import json
import zipfile

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from torch import nn  # noqa: E402

from gradient_doctor.core.dump_folder import MANIFEST, DumpError  # noqa: E402
from gradient_doctor.core.evidence import StepHistory, TrainingSetup  # noqa: E402
from gradient_doctor.core.pipeline import diagnosed  # noqa: E402
from gradient_doctor.torch_adapter.dump import arg_codec  # noqa: E402
from gradient_doctor.torch_adapter.dump.crash_dump import TorchCrashDump  # noqa: E402
from gradient_doctor.torch_adapter.dump.dump_replay import replay_dump  # noqa: E402
from gradient_doctor.torch_adapter.dump.step_tape import TapedRecorder  # noqa: E402
from gradient_doctor.torch_adapter.dump.tape_files import LEAVES, OPS, write_tape  # noqa: E402
from gradient_doctor.torch_adapter.localize.event_evidence import (  # noqa: E402
    recorded_evidence,
)
from gradient_doctor.torch_adapter.localize.module_scope import (  # noqa: E402
    ModuleScope,
    module_names,
)

HERE = "tests/torch_adapter/test_crash_dump.py"


class Scores(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 2)

    def forward(self, x):
        return torch.exp(self.proj(x))  # overflows on the large rows


def _dump(tmp_path, x: torch.Tensor, limit_bytes: int | None = None):
    """Record one step of `Scores` on `x` under the taped recorder, diagnose it, write its
    dump; the dump folder and the run's finding."""
    torch.manual_seed(0)
    model = Scores()
    scope = ModuleScope(module_names([model]))
    names = {id(p): name for name, p in model.named_parameters()}
    limits = {} if limit_bytes is None else {"limit_bytes": limit_bytes}
    recorder = TapedRecorder(scope, names, **limits)
    with scope.hooked(), recorder:
        loss = torch.nn.functional.dropout(model(x), 0.5).sum()
        loss.backward()
    recorder.mark_bad([loss, *(p.grad for p in model.parameters())])
    write_tape(tmp_path / "tape", recorder)
    evidence = recorded_evidence(
        recorder.events,
        recorder.bad_ids,
        recorder.stats,
        3,
        StepHistory(),
        TrainingSetup(framework="torch"),
    )
    finding = diagnosed(evidence)
    target = TorchCrashDump(tmp_path / "dump", "train.py")
    target.write(finding, evidence, tmp_path / "tape", None)
    assert target.written == tmp_path / "dump"
    return tmp_path / "dump", finding


def test_a_dump_is_json_and_safetensors_only_and_replays_to_the_same_exp(tmp_path):
    dump, finding = _dump(tmp_path, _large_rows())
    assert sorted(p.name for p in dump.iterdir()) == sorted([MANIFEST, OPS, LEAVES])
    for path in dump.iterdir():
        head = path.read_bytes()[:2]
        assert head != b"\x80\x04" and not zipfile.is_zipfile(path), (
            path
        )  # no pickle, no torch.save
    manifest = json.loads((dump / MANIFEST).read_text())
    json.loads((dump / OPS).read_text())
    leaves = safetensors_torch.load_file(dump / LEAVES)
    assert {"rng.torch_cpu"} < set(leaves)
    assert manifest["framework"] == "torch" and manifest["versions"]["torch"] == torch.__version__
    assert manifest["left_out"]["leaves"] == [] and manifest["left_out"]["ops"] == []

    replayed = replay_dump(dump)
    assert replayed.reproduced and replayed.stopped is None
    origin = replayed.finding.origin
    assert (origin.op, origin.layer, origin.source.file) == ("Exp", "Scores", HERE)
    assert (origin.op_name, origin.inputs) == (finding.origin.op_name, finding.origin.inputs)
    assert (
        origin.source.code
        == finding.origin.source.code
        == ("return torch.exp(self.proj(x))  # overflows on the large rows")
    )
    assert replayed.finding.category == finding.category == "forward_overflow"


def test_the_replay_recomputes_from_the_leaves_a_finite_batch_stays_finite(tmp_path):
    dump, _ = _dump(tmp_path, _large_rows())
    leaves = safetensors_torch.load_file(dump / LEAVES)
    ops = json.loads((dump / OPS).read_text())
    (batch,) = [e for e in ops["leaves"] if e["name"] is None and e["shape"] == [4, 3]]
    leaves[batch["key"]] = torch.zeros(4, 3)
    safetensors_torch.save_file(leaves, dump / LEAVES)
    with pytest.raises(DumpError, match="leaves.safetensors is corrupted"):
        replay_dump(dump)  # the checksum catches the edit...
    _rewrite_checksum(dump, LEAVES)
    replayed = replay_dump(dump)  # ...and once it is the dump's own, the step is finite
    assert not replayed.reproduced and replayed.stopped is None
    assert replayed.dumped_finding["category"] == "forward_overflow"


def test_past_the_size_limit_leaves_are_left_out_listed_and_the_replay_says_where_it_stopped(
    tmp_path,
):
    dump, _ = _dump(tmp_path, _large_rows(), limit_bytes=40)
    left = json.loads((dump / MANIFEST).read_text())["left_out"]
    assert left["limit_bytes"] == 40 and left["kept_bytes"] <= 40
    assert left["leaves"] and all("would pass" in leaf["why"] for leaf in left["leaves"])
    replayed = replay_dump(dump)
    assert replayed.stopped is not None and "the dump does not hold" in replayed.stopped
    assert "would pass" in replayed.stopped


def test_arguments_are_written_as_json_and_anything_else_is_refused():
    ids = {}

    def tensor_id(tensor):
        return ids.setdefault(id(tensor), len(ids))

    t = torch.ones(2)
    value = [t, 2, -1.5, float("-inf"), None, True, "floor", (1, 2), torch.Size([3])]
    value += [torch.float16, torch.device("cpu"), torch.channels_last, torch.strided, 1 + 2j]
    encoded = arg_codec.encode(value, tensor_id)
    text = json.dumps(encoded, allow_nan=False)
    decoded = arg_codec.decode(json.loads(text), lambda key: t, torch.device)
    assert decoded[0] is t
    assert decoded[1:] == value[1:]
    with pytest.raises(arg_codec.Unencodable, match="torch._C.Generator"):
        arg_codec.encode([torch.Generator()], tensor_id)
    with pytest.raises(ValueError):
        arg_codec.decode({"dtype": "Tensor"}, lambda key: t, torch.device)


def _large_rows() -> torch.Tensor:
    """A batch of rows of +-1000: the linear layer's scores overflow exp in one sign."""
    return torch.tensor([[1000.0] * 3, [-1000.0] * 3] * 2)


def _rewrite_checksum(dump, name: str) -> None:
    from gradient_doctor.core.dump_folder import fingerprint, write_json

    manifest = json.loads((dump / MANIFEST).read_text())
    manifest["files"][name].update(fingerprint(dump / name))
    write_json(dump / MANIFEST, manifest)
