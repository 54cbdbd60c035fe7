"""Each safe op runs on every device torch has here, keeping the input's device and dtype,
with finite values and gradients at its singular points (CUDA where a GPU is present)."""

import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.torch import ops  # noqa: E402

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here"),
    ),
]
HALF_AND_FULL = [torch.float16, torch.bfloat16, torch.float32]

# name: (the op applied to one tensor on the device, the singular input)
AT_SINGULAR_POINTS = {
    "safe_sqrt": (ops.safe_sqrt, [0.0, 4.0]),
    "safe_log": (ops.safe_log, [0.0, 4.0]),
    "safe_div": (lambda y: ops.safe_div(torch.ones_like(y), y), [0.0, 4.0]),
    "safe_norm": (lambda x: ops.safe_norm(x.reshape(1, 2).expand(2, 2) * 0.0, dim=-1), [0.0, 4.0]),
    "safe_acos": (ops.safe_acos, [1.0, -1.0]),
    "safe_asin": (ops.safe_asin, [1.0, -1.0]),
    "safe_where": (lambda x: ops.safe_where(x > 0, torch.log, x), [0.0, 4.0]),
    "stable_logsumexp": (ops.stable_logsumexp, [-float("inf"), -float("inf")]),
    "stable_softmax": (
        lambda x: ops.stable_softmax(x, mask=torch.zeros_like(x)) + ops.stable_softmax(x + 1e4),
        [0.5, 4.0],
    ),
    "stable_segment_softmax": (
        lambda x: ops.stable_segment_softmax(x + 1e4, torch.tensor([0, 1], device=x.device), 2),
        [0.5, 4.0],
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_AND_FULL, ids=str)
@pytest.mark.parametrize("name", sorted(AT_SINGULAR_POINTS))
def test_finite_on_the_device_in_the_input_dtype(name, dtype, device):
    fn, values = AT_SINGULAR_POINTS[name]
    x = torch.tensor(values, dtype=dtype, device=device, requires_grad=True)
    value = fn(x)
    value.float().sum().backward()
    assert (value.device.type, value.dtype) == (torch.device(device).type, dtype)
    assert torch.isfinite(x.grad).all(), x.grad
