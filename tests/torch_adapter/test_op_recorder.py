"""The replay's recorder on real torch ops: aten names in the core's vocabulary, module paths,
user lines, backward ops tied to their forward op, and values followed through in-place ops."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from gradient_doctor.torch_adapter.localize.module_scope import (  # noqa: E402
    ModuleScope,
    module_names,
)
from gradient_doctor.torch_adapter.localize.op_names import op_type  # noqa: E402
from gradient_doctor.torch_adapter.localize.op_recorder import (  # noqa: E402
    READ_VARIABLE,
    OpRecorder,
)

HERE = "tests/torch_adapter/test_op_recorder.py"


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 2)

    def forward(self, x):
        return torch.softmax(self.proj(x), dim=-1)


def _record(model, function):
    scope = ModuleScope(module_names([model]))
    names = {id(p): name for name, p in model.named_parameters()}
    recorder = OpRecorder(scope, names)
    with scope.hooked(), recorder:
        function()
    return recorder


def test_ops_are_named_in_the_core_vocabulary_with_module_and_line():
    model = nn.Sequential(Block(), nn.Tanh())
    x = torch.randn(4, 3)
    recorder = _record(model, lambda: torch.log(model(x)).sum().backward())
    forward = [e for e in recorder.events if e.phase == "forward"]
    kinds = [(e.op_type, e.layer) for e in forward if e.op_type not in ("T", "Detach")]
    assert kinds[:5] == [
        (READ_VARIABLE, "0.proj"),
        (READ_VARIABLE, "0.proj"),
        ("MatMul", "0.proj"),
        ("Softmax", "0"),
        ("Tanh", "1"),
    ]
    (log,) = [e for e in forward if e.op_type == "Log"]
    assert log.layer is None and log.source.file == HERE
    assert (
        log.source.code == "recorder = _record(model, lambda: torch.log(model(x)).sum().backward())"
    )
    backward = [e for e in recorder.events if e.phase == "backward"]
    assert {e.gradient_of for e in backward} >= {"Log", "Tanh", "Softmax", "MatMul"}
    for event in backward:
        if event.forward_index is not None:
            origin = recorder.events[event.forward_index]
            assert (origin.op_type, origin.layer) == (event.gradient_of, event.layer)
            assert event.source == origin.source


def test_an_in_place_write_gives_the_value_a_new_id():
    x = torch.ones(3)

    def step():
        y = x * 2
        y.add_(1)
        y.div_(0)

    recorder = _record(nn.Identity(), step)
    mul, add, div = recorder.events
    assert add.input_ids[0] == mul.output_ids[0] and div.input_ids[0] == add.output_ids[0]
    assert len({*mul.output_ids, *add.output_ids, *div.output_ids}) == 3
    assert (add.outputs[0].min, div.outputs[0].inf) == (3.0, 3)


@pytest.mark.parametrize(
    ("aten", "expected"),
    [
        ("exp", "Exp"),
        ("log", "Log"),
        ("sqrt", "Sqrt"),
        ("div", "RealDiv"),
        ("pow", "Pow"),
        ("addmm", "MatMul"),
        ("mm", "MatMul"),
        ("_softmax", "Softmax"),
        ("native_layer_norm", "NativeLayerNorm"),
    ],
)
def test_op_type(aten, expected):
    assert op_type(aten) == expected


def test_a_window_that_builds_an_embedding_with_a_padding_row_records_its_step():
    # `nn.Embedding(padding_idx=)` zeroes a view of its weight made under no_grad; torch
    # refuses that view's `grad_fn`. A rerun recording from the start builds the model
    # inside its window, and must still tie the backward ops to their forward ones.
    scope = ModuleScope({})
    recorder = OpRecorder(scope, {})
    with scope.hooked(), recorder:
        embedding = nn.Embedding(10, 4, padding_idx=0)
        loss = torch.log(embedding(torch.tensor([1, 2, 0])).sum() * 0.0)
        loss.backward()
    backward = [e for e in recorder.events if e.phase == "backward"]
    assert any(e.gradient_of == "Log" for e in backward)
