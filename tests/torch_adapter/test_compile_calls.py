"""A script that compiles its model (`torch.compile`, `Module.compile`): the doctor is
told, its sampled steps hook no forward from then on (TorchDynamo would trace the hooks
into the user's graph), and a compiled model's modules are named as the model's own."""

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from gradient_doctor.torch_adapter.hooks.compile_calls import CompileCalls, compiled  # noqa: E402
from gradient_doctor.torch_adapter.localize.module_scope import (  # noqa: E402
    module_names,
    parameter_names,
)
from gradient_doctor.torch_adapter.step.module_stats import ModuleStats  # noqa: E402


def test_compiling_a_model_stops_the_sampled_steps_forward_hooks():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    stats = ModuleStats(lambda: [optimizer])
    calls = CompileCalls(stats.stop_watching_forwards)
    original = torch.compile
    calls.install()
    try:
        stats.begin_sample()
        assert stats.hooked
        model.compile()  # `Module.compile` calls `torch.compile`
        assert not stats.hooked
        stats.begin_sample()
        assert not stats.hooked  # and stays off
    finally:
        calls.uninstall()
        stats.close()
    assert torch.compile is original


def test_a_compiled_models_modules_and_parameters_are_named_as_the_models_own():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    wrapper = torch.compile(model)
    assert compiled(wrapper) and not compiled(model)
    stats = ModuleStats(lambda: [], [wrapper])  # as `watch(step, model=wrapper)` makes it
    stats.begin_sample()
    assert not stats.hooked
    names = module_names([wrapper])
    assert names == {**module_names([model]), id(wrapper): "Sequential"}
    optimizer = torch.optim.SGD(wrapper.parameters(), lr=0.1)
    assert set(parameter_names([wrapper], [optimizer]).values()) == {
        "0.weight",
        "0.bias",
        "2.weight",
        "2.bias",
    }
