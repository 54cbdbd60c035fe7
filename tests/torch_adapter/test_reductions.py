"""PyTorch's reader of a softmax's normaliser on recorded steps: the dim, the segment ids
and count, and the mask on the way (a product, a `where`, a `masked_fill` before or after)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.core.summed_groups import find_reduction  # noqa: E402
from gradient_doctor.torch_adapter.localize.module_scope import ModuleScope  # noqa: E402
from gradient_doctor.torch_adapter.localize.op_recorder import OpRecorder  # noqa: E402
from gradient_doctor.torch_adapter.localize.reductions import TorchReductions  # noqa: E402

S = torch.tensor([[1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]])
KEEP = torch.tensor([[True, True, False, True], [True, False, True, True]])
MASK = KEEP.float()
IDS = torch.tensor([0, 2, 0, 2])


def plain(s):
    e = torch.exp(s)
    return e / e.sum(dim=-1, keepdim=True)


def product(s):
    e = torch.exp(s)
    return e / (e * MASK).sum(-1, keepdim=True)


def where(s):
    e = torch.exp(s)
    return e / torch.where(KEEP, e, 0.0).sum(-1, keepdim=True)


def filled_after(s):
    e = torch.exp(s)
    return e / e.masked_fill(~KEEP, 0.0).sum(-1, keepdim=True)


def filled_before(s):
    s = s.masked_fill(~KEEP, float("-inf"))
    e = torch.exp(s)
    return e / e.sum(-1, keepdim=True)


def segments(s):
    e = torch.exp(s[0])
    total = torch.zeros(3).index_add_(0, IDS, e)
    return e / total[IDS]


@pytest.mark.parametrize(
    ("fn", "found"),
    [
        (plain, ("axis", -1, "e.sum", None, False)),
        (product, ("axis", -1, None, "MASK", False)),
        (where, ("axis", -1, None, "KEEP", True)),
        (filled_after, ("axis", -1, None, "KEEP", True)),
        (filled_before, ("axis", -1, None, "KEEP", True)),
        (segments, ("segment", 0, "index_add_", None, False)),
    ],
)
def test_the_reduction_names_its_groups_and_the_mask_on_the_way(fn, found):
    recorder = OpRecorder(ModuleScope({}), {})
    with recorder:
        fn(S)
    exp = next(e for e in recorder.events if e.op_type == "Exp")
    reduction = find_reduction(recorder.events, exp, TorchReductions())
    kind, axis, function, mask, condition = found
    assert (reduction.kind, reduction.axis, reduction.mask) == (kind, axis, mask)
    assert reduction.mask_is_condition is condition
    if function is not None:
        assert reduction.function == function
    if kind == "segment":
        assert (reduction.segment_ids, reduction.num_segments) == ("IDS", "3")
