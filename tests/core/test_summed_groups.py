"""The walk to a softmax's normaliser on hand-built traces, read by a reader written here."""

from dataclasses import dataclass, replace

from gradient_doctor.core.evidence import Reduction
from gradient_doctor.core.findings import SourceLine, TensorStats
from gradient_doctor.core.knowledge.source.reduction_text import first_size, user_call
from gradient_doctor.core.summed_groups import ReductionReader, find_reduction
from tests.core.test_origin_search import event as traced

ROWS = TensorStats("float32", (2, 4), 0.0, 1.0, nan=0, inf=0, zeros=0)
MASK = TensorStats("float32", (2, 4), 0.0, 1.0, nan=0, inf=0, zeros=3)
SUMS = TensorStats("float32", (2, 1), 0.0, 4.0, nan=0, inf=0, zeros=0)


def event(index, op, inputs, outputs, code, stats=None, axes=None, phase="forward"):
    """An op reading tensor ids `inputs` and writing `outputs`, made by the line `code`."""
    stats = stats or [ROWS] * len(inputs)
    written = [(i, SUMS if op == "Sum" else ROWS) for i in outputs]
    made = traced(index, op, list(zip(inputs, stats, strict=True)), written, phase)
    return replace(made, source=SourceLine("train.py", index + 1, code), axes=axes)


@dataclass
class Reader(ReductionReader):
    """Axes from the events, zeros from the input stats, a segment sum named on its line."""

    mask: tuple[str, bool] | None = None
    axis_reductions = frozenset({"Sum"})
    axis_calls = ("sum",)
    segment_sums = {"ScatterAdd": 2}
    passing = frozenset({"Mul", "Select"})

    def axis(self, event):
        return event.axes[0] if event.axes is not None and len(event.axes) == 1 else None

    def segments(self, event):
        return Reduction("segment", event.op_type, segment_ids="ids", source=event.source)

    def holds_zeros(self, event, index):
        return event.inputs[index].zeros > 0

    def mask_before(self, events, origin):
        return self.mask


EXP = event(0, "Exp", [1], [2], "e = exp(s)")


def test_the_sum_of_the_exp_itself_names_its_axis_and_call():
    events = [EXP, event(1, "Sum", [2], [3], "t = e.sum(-1)", axes=(-1,))]
    reduction = find_reduction(events, EXP, Reader())
    assert (reduction.kind, reduction.axis, reduction.function) == ("axis", -1, "e.sum")
    assert reduction.mask is None


def test_an_unmasked_sum_is_preferred_to_one_through_a_mask():
    events = [
        EXP,
        event(1, "Mul", [2, 9], [4], "m = e * keep", stats=[ROWS, MASK]),
        event(2, "Sum", [4], [5], "t = m.sum(-1)", axes=(-1,)),
        event(3, "Sum", [2], [6], "u = e.sum(-1)", axes=(-1,)),
    ]
    assert find_reduction(events, EXP, Reader()).source.line == 4
    masked = find_reduction(events[:3], EXP, Reader())
    assert (masked.mask, masked.mask_is_condition) == ("keep", False)


def test_a_where_passes_its_taken_branch_with_its_condition_as_the_mask():
    taken = [
        EXP,
        event(1, "Select", [8, 2, 7], [4], "m = where(keep, e, 0.0)"),
        event(2, "Sum", [4], [5], "t = m.sum(-1)", axes=(-1,)),
    ]
    reduction = find_reduction(taken, EXP, Reader())
    assert (reduction.mask, reduction.mask_is_condition) == ("keep", True)
    other = [EXP, event(1, "Select", [8, 7, 2], [4], "m = where(keep, 0.0, e)"), taken[2]]
    assert find_reduction(other, EXP, Reader()) is None


def test_a_segment_sum_is_read_by_the_reader_and_a_mask_before_the_exp_kept():
    events = [EXP, event(1, "ScatterAdd", [7, 8, 2], [4], "t = z.index_add_(0, ids, e)")]
    reduction = find_reduction(events, EXP, Reader(mask=("keep", True)))
    assert (reduction.kind, reduction.segment_ids, reduction.mask) == ("segment", "ids", "keep")


def test_a_sum_over_several_axes_and_a_backward_origin_give_none():
    both = [EXP, event(1, "Sum", [2], [3], "t = e.sum((0, 1))", axes=(0, 1))]
    assert find_reduction(both, EXP, Reader()) is None
    backward = event(0, "Exp", [1], [2], "e = exp(s)", phase="backward")
    assert find_reduction([backward, both[1]], backward, Reader()) is None


def test_a_first_size_is_read_from_a_shape_literal_and_sizes_one_by_one_only_when_asked():
    names = ("zeros",)
    assert first_size("tf.zeros([n, d])", names, scalar_sizes=False) == "n"
    assert first_size("torch.zeros((n, d))", names, scalar_sizes=True) == "n"
    assert first_size("torch.zeros(n, d)", names, scalar_sizes=True) == "n"
    assert first_size("tf.zeros(n, tf.float32)", names, scalar_sizes=False) is None
    assert first_size("out", names, scalar_sizes=True) is None


def test_a_call_split_over_lines_is_read_from_its_statement(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("t = tf.math.unsorted_segment_sum(\n    e, ids, num_segments=n\n)\n")
    line = SourceLine(str(path), 1, "t = tf.math.unsorted_segment_sum(")
    call = user_call(line, ("unsorted_segment_sum",))
    assert (call.prefix, call.argument(1, "segment_ids")) == ("tf.math.", "ids")
