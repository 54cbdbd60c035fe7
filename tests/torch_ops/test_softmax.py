"""`stable_softmax`, `stable_segment_softmax` and `stable_logsumexp`: exact values and
gradients, no overflow."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.torch.ops import (  # noqa: E402
    stable_logsumexp,
    stable_segment_softmax,
    stable_softmax,
)
from tests.torch_ops.conftest import all_finite, as_float64, value_and_gradients  # noqa: E402

# Where the hand-written versions overflow: exp(1000) in float32, exp(20) in float16.
LARGE = {torch.float16: 20.0, torch.bfloat16: 1000.0, torch.float32: 1000.0, torch.float64: 1000.0}
WEIGHTS = np.array([0.5, -1.0, 2.0])
INF = float("inf")


def softmax64(x):
    shifted = np.exp(x - x.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def logsumexp64(x):
    largest = x.max(axis=-1)
    return largest + np.log(np.exp(x - largest[..., None]).sum(axis=-1))


def weighted(probabilities):
    # The plain sum of a softmax is 1 whatever the logits: weight it to test the gradient.
    return probabilities * torch.tensor(WEIGHTS, dtype=probabilities.dtype)


def check_softmax(precision, logits):
    value, (gradient,) = value_and_gradients(lambda x: weighted(stable_softmax(x)), logits)
    probabilities = softmax64(as_float64(logits))
    precision.check(value, probabilities * WEIGHTS)
    # d/dx_j sum_i w_i s_i = s_j (w_j - sum_i w_i s_i)
    expected = probabilities * (WEIGHTS - (probabilities * WEIGHTS).sum(-1, keepdims=True))
    precision.check(gradient, expected)


def test_softmax_value_and_gradient_match_the_analytic_ones(precision):
    check_softmax(precision, precision.constant([[1.0, -0.5, 2.0], [0.0, 0.0, 0.0]]))
    assert stable_softmax(precision.constant([1.0, 2.0])).dtype == precision.dtype


def test_softmax_of_large_logits_is_exact_where_the_hand_written_one_is_nan(precision):
    large = LARGE[precision.dtype]
    logits = precision.constant([[large, 0.0, -large], [large, large, large - 1.0]])
    check_softmax(precision, logits)

    def hand_written(x):
        return torch.exp(x) / torch.exp(x).sum(dim=-1, keepdim=True)

    raw_value, (raw_gradient,) = value_and_gradients(hand_written, logits)
    assert not all_finite(raw_value)
    assert not all_finite(raw_gradient)


def test_minus_inf_entries_are_zero_and_a_row_of_them_is_zero_not_nan(float32):
    logits = torch.tensor([[0.0, -INF, 1.0], [-INF, -INF, -INF]])
    value, (gradient,) = value_and_gradients(lambda x: weighted(stable_softmax(x)), logits)
    float32.check(value[0], softmax64(np.array([0.0, -np.inf, 1.0])) * WEIGHTS)
    np.testing.assert_array_equal(value[1], [0.0, 0.0, 0.0])
    assert all_finite(gradient)
    assert torch.isnan(torch.softmax(logits, dim=-1)[1]).all()


def test_a_causal_minus_inf_mask_gives_the_library_softmax(float32):
    scores = torch.tensor([[0.3, 2.0, -1.0], [1.5, -0.5, 0.25], [0.0, 1.0, 2.0]])
    causal = torch.full((3, 3), -INF).triu(1)
    value, (gradient,) = value_and_gradients(lambda s: weighted(stable_softmax(s)), scores + causal)
    _, (library,) = value_and_gradients(lambda s: weighted(torch.softmax(s, -1)), scores + causal)
    float32.check(value, as_float64(weighted(torch.softmax(scores + causal, dim=-1))))
    float32.check(gradient, library)


def test_logsumexp_value_matches_and_gradient_is_the_softmax(precision):
    large = LARGE[precision.dtype]
    x = precision.constant([[1.0, -0.5, 2.0], [large, large - 1.0, 0.0]])
    value, (gradient,) = value_and_gradients(stable_logsumexp, x)
    exact = as_float64(x)
    precision.check(value, logsumexp64(exact))
    precision.check(gradient, softmax64(exact))
    assert stable_logsumexp(x).dtype == precision.dtype

    def hand_written(v):
        return torch.log(torch.exp(v).sum(dim=-1))

    raw_value, (raw_gradient,) = value_and_gradients(hand_written, x)
    assert np.isinf(raw_value[1])
    assert not all_finite(raw_gradient)


def test_logsumexp_of_only_minus_inf_is_minus_inf_with_gradient_zero(float32):
    x = torch.tensor([[-INF, -INF], [0.0, 0.0]])
    value, (gradient,) = value_and_gradients(stable_logsumexp, x)
    float32.check(value, [-np.inf, np.log(2.0)])
    np.testing.assert_array_equal(gradient, [[0.0, 0.0], [0.5, 0.5]])
    _, (library,) = value_and_gradients(lambda v: torch.logsumexp(v, dim=-1), x)
    assert np.isnan(library[0]).all()
    assert torch.isnan(stable_logsumexp(torch.tensor([float("nan"), 0.0])))


def test_logsumexp_second_order_gradient_is_exact(float32):
    x = torch.tensor([1.0, -0.5, 2.0], requires_grad=True)
    (inner,) = torch.autograd.grad(stable_logsumexp(x), x, create_graph=True)
    (outer,) = torch.autograd.grad((inner * torch.tensor(WEIGHTS, dtype=x.dtype)).sum(), x)
    s = softmax64(as_float64(x))
    # Hessian (diag(s) - s s^T) times the weights.
    float32.check(as_float64(outer), s * WEIGHTS - s * (s @ WEIGHTS))


@pytest.mark.parametrize(
    ("dim", "keepdim"), [(None, False), ((0, 1), True), (0, False), (-1, True)]
)
def test_logsumexp_dims_match_torch(float32, dim, keepdim):
    x = torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.0, 500.0]])
    value = stable_logsumexp(x, dim=dim, keepdim=keepdim)
    library_dim = tuple(range(x.dim())) if dim is None else dim
    expected = torch.logsumexp(x, dim=library_dim, keepdim=keepdim)
    assert value.shape == expected.shape
    float32.check(value.numpy(), expected.numpy())


def test_large_inputs_in_every_autograd_mode(mode):
    x = torch.tensor([1000.0, 1000.0])
    value, (gradient,) = value_and_gradients(stable_logsumexp, x, mode=mode)
    np.testing.assert_allclose(value, 1000.0 + np.log(2.0), rtol=1e-6)
    np.testing.assert_allclose(gradient, [0.5, 0.5], rtol=1e-6)
    probabilities, _ = value_and_gradients(stable_softmax, x, mode=mode)
    np.testing.assert_allclose(probabilities, [0.5, 0.5], rtol=1e-6)


def test_invalid_arguments_fail_early():
    with pytest.raises(ValueError, match=r"`dim` must be an int, e.g. -1. Received: dim=\(0,\)"):
        stable_softmax(torch.ones(2, 2), dim=(0,))
    with pytest.raises(ValueError, match="`keepdim` must be a bool. Received: keepdim='no'"):
        stable_logsumexp(torch.ones(2), keepdim="no")
    with pytest.raises(TypeError, match=r"`logits` must be a floating-point tensor"):
        stable_softmax(torch.tensor([1, 2]))


def test_masked_softmax_normalises_over_the_kept_entries_only(float32):
    # The masked position holds garbage far above the others: it takes no part.
    logits = torch.tensor([[1.0, 900.0, 2.0], [1000.0, 1000.0, -5.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    value, (gradient,) = value_and_gradients(
        lambda x: weighted(stable_softmax(x, mask=mask)), logits
    )
    float32.check(value[0], softmax64(np.array([1.0, -np.inf, 2.0])) * WEIGHTS)
    float32.check(value[1], np.array([0.5, 0.5, 0.0]) * WEIGHTS)
    assert gradient[0, 1] == 0.0 and gradient[1, 2] == 0.0
    assert all_finite(gradient)


def test_a_fully_masked_row_is_zero_with_finite_gradients_whatever_its_logits(float32):
    logits = torch.tensor([[float("nan"), INF, 3.0], [0.5, 1.0, 1.5]])
    keep = torch.tensor([[False, False, False], [True, True, True]])
    value, (gradient,) = value_and_gradients(
        lambda x: weighted(stable_softmax(x, mask=keep)), logits
    )
    np.testing.assert_array_equal(value[0], [0.0, 0.0, 0.0])
    float32.check(value[1], softmax64(np.array([0.5, 1.0, 1.5])) * WEIGHTS)
    np.testing.assert_array_equal(gradient[0], [0.0, 0.0, 0.0])
    assert all_finite(gradient)


def test_a_broadcast_mask_keeps_the_same_keys_in_every_row(precision):
    logits = precision.constant([[[3.0, 1.0, 2.0], [0.0, -1.0, 4.0]]])  # (1, 2, 3)
    keys = precision.constant([[[1.0, 1.0, 0.0]]])  # one mask for every query row
    value = stable_softmax(logits, mask=keys)
    assert value.dtype == precision.dtype
    exact = as_float64(logits)[0, :, :2]
    precision.check(as_float64(value)[0], np.pad(softmax64(exact), ((0, 0), (0, 1))))


def segment_softmax64(logits, ids, count):
    """Each segment's softmax of float64 logits (first axis over the entries)."""
    result = np.zeros_like(logits)
    for segment in range(count):
        rows = ids == segment
        if rows.any():
            shifted = np.exp(logits[rows] - logits[rows].max(axis=0, keepdims=True))
            result[rows] = shifted / shifted.sum(axis=0, keepdims=True)
    return result


IDS = torch.tensor([2, 0, 2, 2, 0])  # segment 1 is empty


def test_segment_softmax_value_and_gradient_match_the_analytic_ones(precision):
    large = LARGE[precision.dtype]
    logits = precision.constant([large, 0.5, large - 1.0, -1.0, 0.25])
    edge_weights = np.array([0.5, -1.0, 2.0, 1.5, 3.0])

    def weighted_segments(x):
        return stable_segment_softmax(x, IDS, 3) * torch.tensor(edge_weights, dtype=x.dtype)

    value, (gradient,) = value_and_gradients(weighted_segments, logits)
    s = segment_softmax64(as_float64(logits), IDS.numpy(), 3)
    precision.check(value, s * edge_weights)
    # d/dx_j sum_i w_i s_i = s_j (w_j - sum over j's segment of w_i s_i)
    segment_mean = np.array([(s * edge_weights)[IDS.numpy() == i].sum() for i in IDS.numpy()])
    precision.check(gradient, s * (edge_weights - segment_mean))
    assert stable_segment_softmax(logits, IDS, 3).dtype == precision.dtype

    def hand_written(x):
        e = torch.exp(x)
        return e / torch.zeros(3, dtype=x.dtype).index_add(0, IDS, e)[IDS]

    assert not all_finite(value_and_gradients(hand_written, logits)[0])


def test_segment_softmax_of_minus_infinity_is_zero_and_a_segment_of_it_too(float32):
    logits = torch.tensor([-INF, 1.0, -INF, -INF, 2.0])
    value, (gradient,) = value_and_gradients(lambda x: stable_segment_softmax(x, IDS, 3), logits)
    # Segment 2 holds only -inf; segment 0 holds 1.0 and 2.0.
    np.testing.assert_array_equal(value[[0, 2, 3]], [0.0, 0.0, 0.0])
    float32.check(value[[1, 4]], softmax64(np.array([1.0, 2.0])))
    assert all_finite(gradient)


def test_segment_softmax_normalises_each_head_apart_in_every_autograd_mode(mode):
    logits = torch.tensor([[1000.0, 1.0], [1000.0, 2.0], [5.0, -3.0]])  # (edges, heads)
    ids = torch.tensor([0, 0, 1], dtype=torch.int32)
    value, (gradient,) = value_and_gradients(
        lambda x: stable_segment_softmax(x, ids, torch.tensor(2)), logits, mode=mode
    )
    expected = segment_softmax64(as_float64(logits), ids.numpy(), 2)
    np.testing.assert_allclose(value, expected, rtol=1e-6)
    np.testing.assert_allclose(gradient, np.zeros_like(expected), atol=1e-6)  # sums are 1


def test_segment_softmax_refuses_bad_ids_and_counts():
    with pytest.raises(TypeError, match=r"Received: segment_ids.dtype=float32. Cast it first"):
        stable_segment_softmax(torch.ones(2), torch.tensor([0.0, 1.0]), 2)
    with pytest.raises(ValueError, match=r"one id per entry .*segment_ids.shape=\(3,\)"):
        stable_segment_softmax(torch.ones(2), torch.tensor([0, 1, 1]), 2)
    for count in (0, 2.0, torch.tensor(2.0), True):
        with pytest.raises(ValueError, match=r"`num_segments` must be a positive int"):
            stable_segment_softmax(torch.ones(2), torch.tensor([0, 1]), count)
