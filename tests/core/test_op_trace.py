"""Whether trainable weights lie upstream of an op, on hand-built traces (no TensorFlow)."""

import dataclasses

from gradient_doctor.core.findings import TensorStats
from gradient_doctor.core.op_trace import (
    constant_variable,
    feeding_op_types,
    log_of_sum,
    nearest_weight_read,
    picked_softmax,
    unowned_variable,
    weights_upstream,
    where_values_grew,
)
from tests.core.test_origin_search import FINITE, INF, event

READS = frozenset({"ReadVariableOp"})
SCALAR = TensorStats("float32", (), 1.0, 1.0, nan=0, inf=0, zeros=0, size=1)
# Tensor 1 is the batch, 2 a variable handle, 9 a scalar constant, 8 an unexplained tensor.
STATS = {1: FINITE, 2: None, 8: FINITE, 9: SCALAR}


def test_a_variable_read_upstream_is_found():
    events = [
        event(0, "ReadVariableOp", [(2, FINITE)], [(3, FINITE)]),
        event(1, "MatMul", [(1, FINITE), (3, FINITE)], [(4, FINITE)]),
        event(2, "AddV2", [(4, FINITE), (9, SCALAR)], [(5, FINITE)]),
        event(3, "Exp", [(5, FINITE)], [(6, FINITE)]),
    ]
    assert weights_upstream(events, events[3], READS, frozenset({1}), STATS) is True


def test_an_op_fed_by_the_batch_and_constants_only_has_no_weights_upstream():
    events = [
        event(0, "ReadVariableOp", [(2, FINITE)], [(3, FINITE)]),  # read, but elsewhere
        event(1, "Mul", [(1, FINITE), (9, SCALAR)], [(4, FINITE)]),
        event(2, "Exp", [(4, FINITE)], [(5, FINITE)]),
        event(3, "MatMul", [(5, FINITE), (3, FINITE)], [(6, FINITE)]),
    ]
    assert weights_upstream(events, events[2], READS, frozenset({1}), STATS) is False


def test_a_tensor_the_trace_does_not_explain_leaves_it_unknown():
    events = [event(0, "Mul", [(1, FINITE), (8, FINITE)], [(4, FINITE)])]
    assert weights_upstream(events, events[0], READS, frozenset({1}), STATS) is None


def test_a_read_after_the_op_is_not_upstream_of_it():
    events = [
        event(0, "Exp", [(1, FINITE)], [(4, FINITE)]),
        event(1, "ReadVariableOp", [(2, FINITE)], [(1, FINITE)]),  # same id, later
    ]
    assert weights_upstream(events, events[0], READS, frozenset({1}), STATS) is False


def test_the_ops_feeding_an_op_are_found_a_few_steps_upstream():
    events = [
        event(0, "MatMul", [(1, FINITE), (3, FINITE)], [(4, FINITE)]),
        event(1, "Sigmoid", [(4, FINITE)], [(5, FINITE)]),
        event(2, "Sub", [(9, SCALAR), (5, FINITE)], [(6, FINITE)]),
        event(3, "Log", [(6, FINITE)], [(7, FINITE)]),
    ]
    assert feeding_op_types(events, events[3], depth=2) == {"Sub", "Sigmoid"}
    assert feeding_op_types(events, events[3]) == {"Sub", "Sigmoid", "MatMul"}


def test_the_closest_variable_read_upstream_names_the_feeding_layer():
    def read(index, variable, output, layer):
        return dataclasses.replace(
            event(index, "ReadVariableOp", [(variable, FINITE)], [(output, FINITE)]), layer=layer
        )

    events = [
        read(0, 2, 3, "encoder/hidden"),
        event(1, "MatMul", [(1, FINITE), (3, FINITE)], [(4, FINITE)]),
        read(2, 5, 6, "encoder/z_log_var"),
        event(3, "MatMul", [(4, FINITE), (6, FINITE)], [(7, FINITE)]),
        event(4, "Mul", [(7, FINITE), (9, SCALAR)], [(8, FINITE)]),
        event(5, "Exp", [(8, FINITE)], [(10, FINITE)]),
    ]
    assert nearest_weight_read(events, events[5], READS).layer == "encoder/z_log_var"
    assert nearest_weight_read(events, events[1], READS).layer == "encoder/hidden"
    assert nearest_weight_read(events, events[0], READS) is None


def test_of_x_at_w_plus_b_the_weight_that_scales_is_named_not_the_bias_added_nearer():
    def read(index, output, name):
        return dataclasses.replace(
            event(index, "ReadVariableOp", [], [(output, FINITE)]), op_name=name
        )

    events = [
        read(0, 3, "w"),
        event(1, "MatMul", [(1, FINITE), (3, FINITE)], [(4, FINITE)]),
        read(2, 5, "b"),
        event(3, "AddV2", [(4, FINITE), (5, FINITE)], [(6, FINITE)]),
        event(4, "Exp", [(6, FINITE)], [(7, FINITE)]),
    ]
    assert nearest_weight_read(events, events[4], READS).op_name == "w"
    # With nothing that scales one level further up, the added variable is still named.
    shifted = [events[2], event(1, "AddV2", [(1, FINITE), (5, FINITE)], [(6, FINITE)]), events[4]]
    assert nearest_weight_read(shifted, shifted[2], READS).op_name == "b"


def test_a_variable_read_outside_every_layer_is_named_as_unowned():
    def read(index, output, name, layer):
        made = event(index, "ReadVariableOp", [], [(output, FINITE)])
        return dataclasses.replace(made, op_name=name, layer=layer)

    matmul = dataclasses.replace(
        event(2, "MatMul", [(1, FINITE), (3, FINITE)], [(4, FINITE)]), layer="body"
    )
    events = [
        read(0, 3, "body.weight", "body"),
        read(1, 5, "scale", None),  # a parameter of the root module itself
        matmul,
        read(3, 6, "optimizer0.param2", "optimizer0"),  # a free tensor: no op ran there
        event(4, "Mul", [(4, FINITE), (5, FINITE)], [(7, FINITE)]),
    ]
    assert [unowned_variable(events, events[i], READS) for i in (0, 1, 3)] == [
        None,
        "scale",
        "optimizer0.param2",
    ]
    assert unowned_variable(events, None, READS) is None


def test_the_op_where_values_first_grew_past_a_threshold_is_found():
    def stats(largest):
        return TensorStats("float32", (4,), -largest, largest, nan=0, inf=0, zeros=0, size=4)

    events = [
        event(0, "MatMul", [(1, stats(3.0)), (2, stats(1.0))], [(3, stats(50.0))]),
        event(1, "MatMul", [(3, stats(50.0)), (2, stats(1.0))], [(4, stats(4e7))]),
        event(2, "Relu", [(4, stats(4e7))], [(5, stats(4e7))]),
        event(3, "Square", [(5, stats(4e7))], [(6, INF)]),
    ]
    assert where_values_grew(events, events[3], 1e6).index == 1
    # Data that arrives huge did not grow anywhere in the step.
    assert where_values_grew(events[2:], events[3], 10.0) is None


def test_the_walk_to_where_values_grew_ends_at_an_op_that_wrote_its_own_input():
    def stats(largest):
        return TensorStats("float32", (4,), -largest, largest, nan=0, inf=0, zeros=0, size=4)

    events = [
        event(0, "MatMul", [(1, stats(3.0)), (2, stats(1.0))], [(3, stats(4e7))]),
        event(1, "Relu", [(3, stats(4e7))], [(3, stats(4e7))]),  # in place: same id out
        event(2, "Square", [(3, stats(4e7))], [(6, INF)]),
    ]
    assert where_values_grew(events, events[2], 1e6) is None


def test_a_log_of_the_exps_sum_is_found_through_a_reshape_and_an_epsilon():
    events = [
        event(0, "Exp", [(1, FINITE)], [(2, INF)]),
        event(1, "Sum", [(2, INF)], [(3, INF)]),
        event(2, "Reshape", [(3, INF)], [(4, INF)]),
        event(3, "AddV2", [(4, INF), (9, SCALAR)], [(5, INF)]),
        event(4, "Log", [(5, INF)], [(6, INF)]),
    ]
    assert log_of_sum(events, events[0]) is events[4]


def test_a_softmax_ratio_and_a_log_of_the_ratio_are_not_a_log_of_the_sum():
    events = [
        event(0, "Exp", [(1, FINITE)], [(2, INF)]),
        event(1, "Sum", [(2, INF)], [(3, INF)]),
        event(2, "RealDiv", [(2, INF), (3, INF)], [(4, INF)]),
        event(3, "Log", [(4, INF)], [(5, INF)]),  # log(exp / sum): the shift cancels
        event(4, "Log", [(2, INF)], [(6, INF)]),  # the log of the exp itself
    ]
    assert log_of_sum(events, events[0]) is None


def _one_pass(second_square: str = "Square", same_tensor: bool = True):
    """sqrt(mean(square(x)) - square(mean(x')) + eps), x' the batch again or another."""
    other = 1 if same_tensor else 8
    return [
        event(0, "Square", [(1, FINITE)], [(10, FINITE)]),
        event(1, "Mean", [(10, FINITE)], [(11, FINITE)]),
        event(2, "Mean", [(other, FINITE)], [(12, FINITE)]),
        event(3, second_square, [(12, FINITE), (12, FINITE)], [(13, FINITE)]),
        event(4, "Sub", [(11, FINITE), (13, FINITE)], [(14, FINITE)]),
        event(5, "AddV2", [(14, FINITE), (9, SCALAR)], [(15, FINITE)]),
        event(6, "Sqrt", [(15, FINITE)], [(16, FINITE)]),
    ]


def test_a_variance_computed_in_one_pass_is_found_through_its_epsilon():
    from gradient_doctor.core.op_trace import one_pass_variance

    events = _one_pass()
    sub, mean_of_squares = one_pass_variance(events, events[6])
    assert (sub.index, mean_of_squares.index) == (4, 1)
    assert one_pass_variance(events, events[6]) == one_pass_variance(_one_pass("Mul"), events[6])


def test_a_difference_of_moments_of_two_tensors_is_no_variance():
    from gradient_doctor.core.op_trace import one_pass_variance

    events = _one_pass(same_tensor=False)
    assert one_pass_variance(events, events[6]) is None
    # Nor is a root of any other difference.
    plain = [
        event(0, "Sub", [(1, FINITE), (8, FINITE)], [(14, FINITE)]),
        event(1, "Sqrt", [(14, FINITE)], [(16, FINITE)]),
    ]
    assert one_pass_variance(plain, plain[1]) is None


def test_a_variable_holding_one_value_is_found_through_abs_and_a_reshape():
    zeros = TensorStats("float32", (4,), 0.0, 0.0, nan=0, inf=0, zeros=4, size=4)
    events = [
        event(0, "ReadVariableOp", [(2, FINITE)], [(3, zeros)]),
        event(1, "Abs", [(3, zeros)], [(4, zeros)]),
        event(2, "Reshape", [(4, zeros)], [(5, zeros)]),
        event(3, "Log", [(5, zeros)], [(6, FINITE)]),
        event(4, "ReadVariableOp", [(7, FINITE)], [(8, FINITE)]),
        event(5, "Log", [(8, FINITE)], [(9, FINITE)]),
    ]
    values = {3: "flow.scale", 8: "flow.shift"}
    assert constant_variable(events, events[3], values) == (0, "flow.scale", 0.0)
    # A variable whose values differ (FINITE spans -3.1 to 712.4) is no one constant.
    assert constant_variable(events, events[5], values) is None
    # Through an op that changes the values (an exp), the variable is not the input.
    events[1] = event(1, "Exp", [(3, zeros)], [(4, zeros)])
    assert constant_variable(events, events[3], values) is None


def test_a_log_of_values_picked_from_a_softmax_finds_the_softmax():
    events = [
        event(0, "Softmax", [(1, FINITE)], [(2, FINITE)]),
        event(1, "Detach", [(2, FINITE)], [(3, FINITE)]),  # saved for the backward
        event(2, "Gather", [(2, FINITE), (9, SCALAR)], [(4, FINITE)]),
        event(3, "Squeeze", [(4, FINITE)], [(5, FINITE)]),
        event(4, "Log", [(5, FINITE)], [(6, FINITE)]),
    ]
    assert picked_softmax(events, events[4]) is events[0]
    # The probabilities read elsewhere too (a confidence printed): the log cannot move.
    events.append(event(5, "Max", [(2, FINITE)], [(7, FINITE)]))
    assert picked_softmax(events, events[4]) is None
    # Summed with a one-hot mask, not picked: the log of a sum is not a sum of logs.
    summed = [
        event(0, "Softmax", [(1, FINITE)], [(2, FINITE)]),
        event(1, "Mul", [(2, FINITE), (9, SCALAR)], [(4, FINITE)]),
        event(2, "Log", [(4, FINITE)], [(6, FINITE)]),
    ]
    assert picked_softmax(summed, summed[2]) is None
