"""The replay of a failing call draws what the call drew (the generators are put back to
their state before it), and after the replay they are where the unwatched run has them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import gradient_doctor.torch as doctor_torch  # noqa: E402
from tests.conftest import line_of  # noqa: E402
from tests.scripts.torch import noise_sqrt_function_loop as script  # noqa: E402
from tests.torch_adapter.conftest import first_nonfinite_step, run_until_stopped  # noqa: E402

SCRIPT = "tests/scripts/torch/noise_sqrt_function_loop.py"
CALLS = 200
TARGET = 1.7  # about sqrt(3): the scale stays near 3


def test_the_replay_sees_the_failing_calls_own_noise():
    scale, optimizer, step, seen = script.make()
    watched = doctor_torch.watch(step, optimizer=optimizer, verbose=False)
    finding, calls = run_until_stopped(watched, [(TARGET,)] * CALLS)
    after = torch.rand(3)

    _, _, plain, plain_seen = script.make()
    expected = first_nonfinite_step(plain, [(TARGET,)] * CALLS, [])
    assert expected is not None and expected > 0
    assert finding is not None and finding.step == expected
    origin = finding.origin
    assert (finding.category, origin.op, origin.layer) == ("forward_domain", "Sqrt", None)
    assert origin.source.line == line_of(SCRIPT, "spread = torch.sqrt(scale + noise)")
    # The replay's input to the root holds the failing call's draw (seen[calls] is the
    # replay's own; seen[calls - 1] the call's): the same value, so the same noise. The
    # fix trials after it (from seen[calls + 1] on) start with that draw too.
    failing_draw = seen[calls - 1]
    assert len(seen) > calls + 1 and torch.equal(seen[calls], failing_draw)
    assert torch.equal(seen[calls + 1], failing_draw)
    assert origin.inputs[0].min == pytest.approx(float(scale.detach() + failing_draw))
    # The generator after the replay and the trials is where the unwatched run's is after that call.
    _, _, plain_step, _ = script.make()
    for _ in range(calls):
        plain_step(TARGET)
    assert torch.equal(after, torch.rand(3))
