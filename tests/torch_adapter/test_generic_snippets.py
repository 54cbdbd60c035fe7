"""The PyTorch code a fix without a patch shows runs as written on the modules it names."""

import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.core.findings import Origin  # noqa: E402
from gradient_doctor.core.knowledge.remedies.fixes import constrain_weights  # noqa: E402


@pytest.mark.parametrize(
    "module",
    [torch.nn.Linear(5, 4), torch.nn.RNN(5, 4), torch.nn.LSTM(5, 4), torch.nn.Conv1d(5, 4, 3)],
    ids=["linear", "rnn", "lstm", "conv"],
)
def test_the_weight_bound_runs_on_any_module_and_bounds_each_unit(module):
    # `.weight.renorm_` once raised AttributeError on an nn.RNN (weight_ih_l0, ...).
    origin = Origin(
        op="MatMul",
        op_name="aten.mm",
        layer="body",
        source=None,
        inputs=(),
        outputs=(),
        gradient_of=None,
    )
    model = torch.nn.Sequential()
    model.add_module("body", module)
    with torch.no_grad():
        for weight in module.parameters():
            weight.mul_(100.0)
    exec(constrain_weights(origin, None, "torch").code, {"torch": torch, "model": model})
    for name, weight in module.named_parameters():
        if "weight" in name:
            assert weight.flatten(1).norm(dim=1).max() <= 3.0 + 1e-4, name
