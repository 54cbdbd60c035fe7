"""Shared pieces of the PyTorch adapter's tests: deterministic kernels, a run to stop."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def deterministic():
    """Deterministic kernels, one thread: watched and unwatched runs compare bit for bit."""
    was, threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    yield
    torch.use_deterministic_algorithms(was)
    torch.set_num_threads(threads)


def run_until_stopped(step, batches):
    """Call the watched `step` on each batch; the finding it stopped with and the number
    of calls made (None, calls when it never stopped)."""
    from gradient_doctor.errors import TrainingStopped

    calls = 0
    try:
        for batch in batches:
            calls += 1
            step(*batch)
    except TrainingStopped as stopped:
        return stopped.finding, calls
    return None, calls


def first_nonfinite_step(step, batches, parameters) -> int | None:
    """The first step of an unwatched run whose loss or gradients are not finite."""
    for index, batch in enumerate(batches):
        loss = step(*batch)
        values = [torch.as_tensor(loss), *(p.grad for p in parameters if p.grad is not None)]
        if not all(bool(torch.isfinite(v).all()) for v in values):
            return index
    return None


def same_state(model, optimizer, other_model, other_optimizer) -> bool:
    """Whether two models' weights and their optimizers' states are bit-identical."""
    for mine, theirs in zip(model.state_dict().values(), other_model.state_dict().values()):
        if not torch.equal(mine, theirs):
            return False
    mine = optimizer.state_dict()["state"]
    theirs = other_optimizer.state_dict()["state"]
    if mine.keys() != theirs.keys():
        return False
    return all(
        _same_value(value, theirs[key][name]) for key in mine for name, value in mine[key].items()
    )


def _same_value(value, other) -> bool:
    """Bit-identical tensors, lists of them (LBFGS's history), or equal plain values."""
    if isinstance(value, torch.Tensor):
        return isinstance(other, torch.Tensor) and torch.equal(value, other)
    if isinstance(value, list | tuple):
        return (
            isinstance(other, list | tuple)
            and len(value) == len(other)
            and all(_same_value(a, b) for a, b in zip(value, other))
        )
    return value == other
