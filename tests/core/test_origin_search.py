"""The walk from bad results back to the first op, on hand-built traces (no TensorFlow)."""

from gradient_doctor.core.findings import SourceLine, TensorStats
from gradient_doctor.core.op_trace import OpEvent
from gradient_doctor.core.origin_search import find_origin

FINITE = TensorStats("float32", (4,), -1.0, 1.0, nan=0, inf=0, zeros=0)
INF = TensorStats("float32", (4,), -1.0, 1.0, nan=0, inf=2, zeros=0)
NAN = TensorStats("float32", (4,), -1.0, 1.0, nan=2, inf=0, zeros=0)


def event(index, op, inputs, outputs, phase="forward", forward_index=None):
    """An op reading tensors `inputs` and writing `outputs`, given as (id, stats) pairs."""
    return OpEvent(
        index=index,
        op_type=op,
        op_name=op,
        layer=None,
        phase=phase,
        gradient_of=None,
        forward_index=forward_index,
        input_ids=tuple(i for i, _ in inputs),
        output_ids=tuple(i for i, _ in outputs),
        inputs=tuple(s for _, s in inputs),
        outputs=tuple(s for _, s in outputs),
        source=SourceLine("train.py", index + 1, op),
    )


def test_first_creator_on_the_path_is_the_origin():
    events = [
        event(0, "MatMul", [(1, FINITE), (2, FINITE)], [(3, FINITE)]),
        event(1, "Exp", [(3, FINITE)], [(4, INF)]),
        event(2, "Sum", [(4, INF)], [(5, INF)]),
        event(3, "RealDiv", [(4, INF), (5, INF)], [(6, NAN)]),
        event(4, "Mean", [(6, NAN)], [(7, NAN)]),
    ]
    result = find_origin(events, [7])
    assert result.origin.op_type == "Exp"
    assert result.unproduced_ids == ()


def test_intended_infinity_that_becomes_finite_is_not_blamed():
    events = [
        event(0, "Fill", [(1, FINITE)], [(2, INF)]),  # an attention mask of -inf
        event(1, "Softmax", [(2, INF)], [(3, FINITE)]),  # turned into exact zeros
        event(2, "Log", [(3, FINITE)], [(4, INF)]),  # the real problem
        event(3, "Mean", [(4, INF)], [(5, INF)]),
    ]
    assert find_origin(events, [5]).origin.op_type == "Log"


def test_earliest_of_two_creators_wins():
    events = [
        event(0, "Sqrt", [(1, FINITE)], [(2, NAN)]),
        event(1, "Log", [(3, FINITE)], [(4, INF)]),
        event(2, "Add", [(4, INF), (2, NAN)], [(5, NAN)]),
    ]
    assert find_origin(events, [5]).origin.op_type == "Sqrt"


def test_nonfinite_value_from_outside_the_step_is_unproduced():
    events = [event(0, "MatMul", [(1, NAN), (2, FINITE)], [(3, NAN)])]
    result = find_origin(events, [3])
    assert result.origin is None
    assert result.unproduced_ids == (1,)


def test_backward_origin_masked_by_select_is_the_where_trap():
    events = [
        event(0, "Log", [(1, FINITE)], [(2, INF)]),
        event(1, "SelectV2", [(9, FINITE), (2, INF), (3, FINITE)], [(4, FINITE)]),
        event(2, "Reciprocal", [(1, FINITE)], [(5, INF)], phase="backward", forward_index=0),
        event(3, "Mul", [(6, FINITE), (5, INF)], [(7, NAN)], phase="backward", forward_index=0),
    ]
    result = find_origin(events, [7])
    assert result.origin.op_type == "Reciprocal"
    assert result.forward_op.op_type == "Log"
    assert result.masked_by_select


def test_backward_origin_without_select_is_not_masked():
    events = [
        event(0, "Sqrt", [(1, FINITE)], [(2, FINITE)]),
        event(1, "SqrtGrad", [(2, FINITE), (3, FINITE)], [(4, INF)], "backward", 0),
    ]
    result = find_origin(events, [4])
    assert result.origin.op_type == "SqrtGrad"
    assert not result.masked_by_select


def test_a_non_finite_value_no_op_made_is_traced_to_its_first_reader():
    # Tensor 2 is -inf from the start (a constant); Mul is the first op to read it.
    events = [
        event(0, "Sub", [(1, FINITE)], [(3, FINITE)]),
        event(1, "Mul", [(3, FINITE), (2, INF)], [(4, NAN)]),
        event(2, "Mean", [(4, NAN)], [(5, NAN)]),
    ]
    result = find_origin(events, [5])
    assert result.origin is None
    assert result.unproduced_ids == (2,)
    assert result.first_reader.op_type == "Mul"


MINUS_INF = TensorStats("float32", (4,), -1.0, 1.0, nan=0, inf=1, zeros=0, neg_inf=1)
PLUS_INF = TensorStats("float32", (4,), -1.0, 1.0, nan=0, inf=1, zeros=0, pos_inf=1)


def test_an_exp_overflowing_beside_a_minus_infinity_mask_is_the_origin():
    # exp(where(mask, s, -inf)): exp(-inf) is 0, so the +inf it wrote is its own.
    events = [
        event(0, "SelectV2", [(1, FINITE), (2, FINITE), (3, MINUS_INF)], [(4, MINUS_INF)]),
        event(1, "Exp", [(4, MINUS_INF)], [(5, PLUS_INF)]),
        event(2, "Sum", [(5, PLUS_INF)], [(6, PLUS_INF)]),
        event(3, "RealDiv", [(5, PLUS_INF), (6, PLUS_INF)], [(7, NAN)]),
    ]
    assert find_origin(events, [7]).origin.op_type == "Exp"
    # A +inf reaching exp is still followed back to where it was made.
    events[0] = event(0, "Log", [(1, FINITE)], [(4, PLUS_INF)])
    events[1] = event(1, "Exp", [(4, PLUS_INF)], [(5, PLUS_INF)])
    assert find_origin(events, [7]).origin.op_type == "Log"


def test_the_origins_other_forward_calls_of_its_op_come_with_the_evidence():
    from gradient_doctor.core.origin_search import trace_evidence

    near_zero = TensorStats("float32", (4,), 0.0, 0.9, nan=0, inf=0, zeros=1)
    events = [
        event(0, "Log", [(1, near_zero)], [(2, INF)]),
        event(1, "Log", [(3, FINITE)], [(4, FINITE)]),
        event(2, "Exp", [(5, FINITE)], [(6, FINITE)]),
        event(3, "LogGrad", [(7, FINITE)], [(8, FINITE)], phase="backward", forward_index=1),
        event(4, "AddV2", [(2, INF), (4, FINITE)], [(9, INF)]),
    ]
    evidence = trace_evidence(events, [9], step=3).evidence
    assert evidence.origin.source.line == 1
    assert [(call.op, call.source.line) for call in evidence.same_op_calls] == [("Log", 2)]
    assert evidence.same_op_calls[0].inputs == (FINITE,)


def test_a_regression_loss_ops_targets_are_the_evidences_target_scale():
    from gradient_doctor.core.origin_search import trace_evidence

    prices = TensorStats("float32", (32, 1), 2.1e5, 6.7e5, nan=0, inf=0, zeros=0)
    events = [
        event(0, "MatMul", [(1, FINITE), (2, FINITE)], [(3, FINITE)]),
        event(1, "MseLoss", [(3, FINITE), (4, prices)], [(5, INF)]),
    ]
    target = trace_evidence(events, [5], step=2).evidence.target_scale
    assert (target.tensor, target.largest, target.mean) == ("of MseLoss", 6.7e5, None)
    without = trace_evidence(events[:1] + [event(1, "Exp", [(3, FINITE)], [(5, INF)])], [5], 2)
    assert without.evidence.target_scale is None
    # An autoencoder's targets are its inputs (rows picked from the same data, `x =
    # data[perm]`): their scale is the input's, not targets to standardise.
    readings = TensorStats("float32", (64, 32), -200.0, 1015.0, nan=0, inf=0, zeros=0)
    reconstruction = [
        event(0, "Index", [(9, readings), (8, FINITE)], [(1, readings)]),
        event(1, "MatMul", [(1, readings), (2, FINITE)], [(3, FINITE)]),
        event(2, "MseLoss", [(3, FINITE), (1, readings)], [(5, INF)]),
    ]
    assert trace_evidence(reconstruction, [5], step=0).evidence.target_scale is None


def test_a_nonfinite_value_the_step_was_fed_is_bad_input_read_at_its_first_readers_line():
    from gradient_doctor.core.origin_search import trace_evidence

    data = TensorStats("float32", (640, 6), -3.0, 3.0, nan=1, inf=0, zeros=0)
    events = [
        event(0, "Slice", [(1, data)], [(2, NAN)]),
        event(1, "MatMul", [(2, NAN), (3, FINITE)], [(4, NAN)]),
    ]
    (bad,) = trace_evidence(events, [4], step=6, data_ids=frozenset({1})).evidence.bad_inputs
    assert (bad.shape, bad.nan, bad.label) == ((640, 6), 1, "the tensor read at train.py:1")
    # A non-finite tensor that is not the step's data is no bad input (a constant).
    assert not trace_evidence(events, [4], step=6).evidence.bad_inputs


def test_minus_infinity_minus_a_masks_minus_infinity_is_the_subtractions_own_nan():
    # logits - logsumexp(logits) over a row masked everywhere: -inf - -inf. The fill's
    # -inf is on purpose; the NaN is the subtraction's (and the log of the row's sum of
    # 0, inside the log-sum-exp, is not blamed).
    events = [
        event(0, "MaskedFill", [(1, FINITE), (2, FINITE)], [(3, MINUS_INF)]),
        event(1, "Exp", [(3, MINUS_INF)], [(4, FINITE)]),
        event(2, "Sum", [(4, FINITE)], [(5, FINITE)]),
        event(3, "Log", [(5, FINITE)], [(6, MINUS_INF)]),
        event(4, "Sub", [(3, MINUS_INF), (6, MINUS_INF)], [(7, NAN)]),
        event(5, "Mean", [(7, NAN)], [(8, NAN)]),
    ]
    assert find_origin(events, [8]).origin.op_type == "Sub"
    # 0 * log(0): the -inf is a log's, no fill's: the log is the origin.
    events = [
        event(0, "Log", [(1, FINITE)], [(3, MINUS_INF)]),
        event(1, "Mul", [(2, FINITE), (3, MINUS_INF)], [(4, NAN)]),
        event(2, "Mean", [(4, NAN)], [(5, NAN)]),
    ]
    assert find_origin(events, [5]).origin.op_type == "Log"


def test_the_features_fed_to_the_first_layer_give_the_input_scale():
    from gradient_doctor.core.origin_search import trace_evidence

    pixels = TensorStats("float32", (50, 100), 0.0, 255.0, nan=0, inf=0, zeros=0)
    mask = TensorStats("float32", (50, 50), -1e9, 0.0, nan=0, inf=0, zeros=0)
    events = [
        event(0, "AddV2", [(9, mask), (1, FINITE)], [(2, FINITE)]),  # a mask: not features
        event(1, "MatMul", [(3, pixels), (4, FINITE)], [(5, FINITE)]),
        event(2, "Exp", [(5, FINITE)], [(6, INF)]),
    ]
    evidence = trace_evidence(events, [6], 3, data_ids=frozenset({3, 9})).evidence
    assert evidence.input_scale == ("read at train.py:2", 255.0)
    # Rows the step picked out of the fed data (`X[idx]`, as a float) are its features.
    picked = [
        event(0, "Index", [(3, pixels), (7, FINITE)], [(8, pixels)]),
        event(1, "Cast", [(8, pixels)], [(10, pixels)]),
        event(2, "MatMul", [(10, pixels), (4, FINITE)], [(5, FINITE)]),
        event(3, "Exp", [(5, FINITE)], [(6, INF)]),
    ]
    evidence = trace_evidence(picked, [6], 4, data_ids=frozenset({3})).evidence
    assert evidence.input_scale == ("read at train.py:3", 255.0)
    # No dense or convolution op read a fed tensor: no scale.
    evidence = trace_evidence(events[:1] + events[2:], [6], 3, data_ids=frozenset({9})).evidence
    assert evidence.input_scale is None


def _sized(magnitude: float) -> TensorStats:
    return TensorStats("float32", (4,), -magnitude, magnitude, nan=0, inf=0, zeros=0)


def test_a_finite_step_names_where_its_forward_values_blew_up_and_the_other_such_exp():
    from gradient_doctor.core.origin_search import trace_evidence

    events = [
        event(0, "MatMul", [(1, _sized(3.0)), (2, _sized(0.5))], [(3, _sized(40.0))]),
        event(1, "Exp", [(3, _sized(40.0))], [(4, _sized(2e17))]),  # the blow-up
        event(2, "MatMul", [(4, _sized(2e17)), (5, _sized(0.5))], [(6, _sized(1e17))]),
        event(3, "Exp", [(3, _sized(40.0))], [(7, _sized(2e17))]),  # a second, elsewhere
        event(4, "Square", [(6, _sized(1e17))], [(8, _sized(1e34))]),
        event(5, "Exp", [(1, _sized(3.0))], [(9, _sized(20.0))]),  # a small exp: left out
        event(6, "AddV2", [(8, _sized(1e34)), (7, _sized(2e17))], [(10, _sized(1e34))]),
    ]
    found = trace_evidence(events, [], step=0, data_ids=frozenset({1})).evidence
    assert found.origin is None
    assert [(call.op, call.source.line) for call in found.forward_blowup] == [
        ("Exp", 2),
        ("Exp", 4),
    ]
    assert found.forward_blowup[0].outputs[0].max == 2e17


def test_values_huge_from_the_data_itself_are_no_forward_blowup():
    from gradient_doctor.core.origin_search import trace_evidence

    events = [
        event(0, "MatMul", [(1, _sized(1e9)), (2, _sized(0.5))], [(3, _sized(4e9))]),
        event(1, "Square", [(3, _sized(4e9))], [(4, _sized(1.6e19))]),
    ]
    found = trace_evidence(events, [], step=0, data_ids=frozenset({1})).evidence
    assert found.forward_blowup == ()


def test_weights_already_huge_are_no_forward_blowup():
    from gradient_doctor.core.origin_search import trace_evidence

    events = [
        event(0, "ReadVariableOp", [], [(2, _sized(7e29))]),  # an update threw the weights
        event(1, "MatMul", [(1, _sized(3.0)), (2, _sized(7e29))], [(3, _sized(4e30))]),
        event(2, "Square", [(3, _sized(4e30))], [(4, _sized(1.6e37))]),
    ]
    found = trace_evidence(events, [], step=1, data_ids=frozenset({1})).evidence
    assert found.forward_blowup == ()


def _zeros(count: int) -> TensorStats:
    return TensorStats("float32", (4,), 0.0, 0.5, nan=0, inf=0, zeros=count)


def test_zeros_a_log_read_are_traced_to_the_product_that_underflowed_not_to_a_relu():
    from gradient_doctor.core.op_trace import where_zeros_began

    probabilities = TensorStats("float32", (4, 300), 0.1, 0.9, nan=0, inf=0, zeros=0)
    underflow = [
        event(0, "Prod", [(1, probabilities)], [(2, _zeros(4))]),
        event(1, "Mul", [(2, _zeros(4)), (3, FINITE)], [(4, _zeros(4))]),
        event(2, "Sum", [(4, _zeros(4))], [(5, _zeros(4))]),
        event(3, "Log", [(5, _zeros(4))], [(6, INF)]),
    ]
    assert where_zeros_began(underflow, underflow[-1]).op_type == "Prod"
    # A relu's zeros are made on purpose, no underflow: nothing to name.
    relu = [
        event(0, "Relu", [(1, FINITE)], [(2, _zeros(2))]),
        event(1, "Log", [(2, _zeros(2))], [(3, INF)]),
    ]
    assert where_zeros_began(relu, relu[-1]) is None


def test_an_exp_input_divided_by_a_temperature_is_found_through_a_diagonal():
    from gradient_doctor.core.op_trace import scaled_by_constant

    cosines = TensorStats("float32", (8, 8), -1.0, 1.0, nan=0, inf=0, zeros=0)
    scaled = TensorStats("float32", (8, 8), -200.0, 200.0, nan=0, inf=0, zeros=0)
    diagonal = TensorStats("float32", (8,), 190.0, 200.0, nan=0, inf=0, zeros=0)
    tau = TensorStats("float32", (), 0.005, 0.005, nan=0, inf=0, zeros=0)
    # TensorFlow reads the temperature as a tensor; PyTorch's `x / 0.005` reads a number.
    for inputs in ([(1, cosines), (2, tau)], [(1, cosines)]):
        events = [
            event(0, "RealDiv", inputs, [(3, scaled)]),
            event(1, "DiagonalCopy", [(3, scaled)], [(4, diagonal)]),
            event(2, "Exp", [(4, diagonal)], [(5, INF)]),
        ]
        found, factor, before = scaled_by_constant(events, events[-1])
        assert found.op_type == "RealDiv" and round(factor) == 200 and before == 1.0
    # A division by a number above 1 scales down: no temperature to blame.
    halved = [
        event(
            0,
            "RealDiv",
            [(1, scaled), (2, TensorStats("float32", (), 2.0, 2.0, 0, 0, 0))],
            [(3, cosines)],
        ),
        event(1, "Exp", [(3, cosines)], [(4, INF)]),
    ]
    assert scaled_by_constant(halved, halved[-1]) is None


def test_a_variable_no_layer_owns_is_named_by_the_adapters_name_for_its_value():
    # A raw tf.Variable read eagerly: the read op says only "ReadVariableOp".
    from gradient_doctor.core.origin_search import trace_evidence

    events = [
        event(0, "ReadVariableOp", [(2, FINITE)], [(3, FINITE)]),
        event(1, "MatMul", [(1, FINITE), (3, FINITE)], [(4, FINITE)]),
        event(2, "Exp", [(4, FINITE)], [(5, INF)]),
    ]
    reads = frozenset({"ReadVariableOp"})
    named = trace_evidence(events, [5], 0, frozenset({1}), reads, variable_values={3: "w"})
    assert named.evidence.weights_variable == "w"
    unnamed = trace_evidence(events, [5], 0, frozenset({1}), reads)
    assert unnamed.evidence.weights_variable == "ReadVariableOp"
