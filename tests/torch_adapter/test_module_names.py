"""The names modules are reported by: the script's own names for several models."""

from __future__ import annotations

import sys
import types

import pytest

torch = pytest.importorskip("torch")

from gradient_doctor.torch_adapter.localize.module_scope import (  # noqa: E402
    module_names,
    parameter_names,
)


def test_several_models_are_named_by_the_scripts_own_global_names(monkeypatch):
    # A GAN written at module level: two Sequentials, which by class alone would be
    # "Sequential" and "Sequential_1".
    generator = torch.nn.Sequential(torch.nn.Linear(2, 3))
    discriminator = torch.nn.Sequential(torch.nn.Linear(3, 1))
    script = types.ModuleType("__main__")
    script.generator, script.discriminator = generator, discriminator
    monkeypatch.setitem(sys.modules, "__main__", script)
    names = module_names([generator, discriminator])
    assert names[id(generator)] == "generator"
    assert names[id(discriminator[0])] == "discriminator.0"
    optimizer = torch.optim.SGD([*generator.parameters(), *discriminator.parameters()], lr=0.1)
    assert (
        "discriminator.0.weight"
        in parameter_names([generator, discriminator], [optimizer]).values()
    )


def test_unbound_models_keep_their_class_names_and_one_model_its_bare_paths(monkeypatch):
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    first, second = torch.nn.Sequential(torch.nn.Linear(2, 2)), torch.nn.Sequential()
    assert module_names([first, second])[id(second)] == "Sequential_1"
    script = types.ModuleType("__main__")
    script.model = first
    monkeypatch.setitem(sys.modules, "__main__", script)
    names = module_names([first])
    assert (names[id(first)], names[id(first[0])]) == ("Sequential", "0")
