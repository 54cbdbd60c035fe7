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


def test_parts_of_a_global_module_whose_forward_never_runs_are_named_within_it(monkeypatch):
    # An actor-critic whose `act` and `evaluate` call `self.actor` and `self.critic`: the
    # parts are the roots seen, named within the script's `policy`, not by class.
    class ActorCritic(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.actor = torch.nn.Sequential(torch.nn.Linear(4, 2))
            self.critic = torch.nn.Sequential(torch.nn.Linear(4, 1))

    policy = ActorCritic()
    script = types.ModuleType("__main__")
    script.policy = policy
    monkeypatch.setitem(sys.modules, "__main__", script)
    names = module_names([policy.actor, policy.critic])
    assert (names[id(policy.actor[0])], names[id(policy.critic[0])]) == ("actor.0", "critic.0")
    optimizer = torch.optim.Adam(policy.parameters())
    assert "critic.0.bias" in parameter_names([policy.actor, policy.critic], [optimizer]).values()
    # A part the script binds to a global name of its own keeps it.
    script.actor = policy.actor
    assert module_names([policy.actor, policy.critic])[id(policy.actor[0])] == "actor.0"
    assert module_names([policy.actor, policy.critic])[id(policy.actor)] == "actor"
