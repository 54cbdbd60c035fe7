"""The op that made each input of an op, looking through ops that only reshape, view or
index a value (the relu behind `F.relu(h).squeeze(-1)`), on hand-built traces."""

import pytest

from gradient_doctor.core.op_trace import VIEW_OPS, input_producers
from tests.core.test_origin_search import FINITE, INF, event


@pytest.mark.parametrize("views", [("Squeeze",), ("View", "Expand"), ("StridedSlice", "Reshape")])
def test_the_producer_is_found_through_views_of_its_output(views):
    events = [event(0, "Relu", [(1, FINITE)], [(2, FINITE)])]
    for offset, view in enumerate(views):
        events.append(
            event(1 + offset, view, [(2 + offset, FINITE), (90, FINITE)], [(3 + offset, FINITE)])
        )
    last = len(events)
    events.append(event(last, "Log", [(2 + len(views), FINITE)], [(99, INF)]))
    (producer,) = input_producers(events, events[last])
    assert producer.op_type == "Relu"


def test_an_op_that_changes_values_is_the_producer_itself():
    events = [
        event(0, "Relu", [(1, FINITE)], [(2, FINITE)]),
        event(1, "Mul", [(2, FINITE), (8, FINITE)], [(3, FINITE)]),
        event(2, "Log", [(3, FINITE)], [(4, INF)]),
    ]
    assert [p.op_type for p in input_producers(events, events[2])] == ["Mul"]


def test_a_view_of_a_tensor_no_op_made_has_no_producer():
    events = [
        event(0, "Squeeze", [(1, FINITE)], [(2, FINITE)]),  # 1: the batch
        event(1, "Log", [(2, FINITE)], [(3, INF)]),
    ]
    assert input_producers(events, events[1]) == (None,)


def test_a_where_is_not_a_view():
    # PyTorch's `select` is recorded as "Select", the core's name for a `where`.
    assert "Select" not in VIEW_OPS and "SelectV2" not in VIEW_OPS
