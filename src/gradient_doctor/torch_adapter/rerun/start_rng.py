"""The random generators' state when a script starts, as JSON, so a rerun draws what the run drew.

A seeded rerun of the user's script must draw the same dropout masks, noise, shuffles
and initial weights as the run it repeats, seeded or not: torch's default CPU
generator starts from a seed of its own in each process, and Python's `random` and
NumPy's global generator from the operating system's entropy. Their states are read
before the script runs (nothing is drawn) and put back, in the rerun, before it runs.
CUDA's generators are not read (that would initialize CUDA in a CPU-only run): a
script that draws from them without seeding reruns with other draws, and the rerun
says it did not reproduce the failure.
"""

from __future__ import annotations

import base64
import random
import sys

import torch


def read() -> dict:
    """The generators' states now: torch's CPU one, Python's, and NumPy's when NumPy is loaded
    (torch loads it), as a JSON-ready dict."""
    state = {
        "torch_cpu": base64.b64encode(bytes(torch.get_rng_state().tolist())).decode("ascii"),
        "python": _listed(random.getstate()),
    }
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        name, keys, position, has_gauss, gauss = numpy.random.get_state()
        state["numpy"] = [name, keys.tolist(), int(position), int(has_gauss), float(gauss)]
    return state


def restore(state: dict) -> None:
    """Put the generators back to `state` (from `read`, maybe in another process)."""
    cpu = base64.b64decode(state["torch_cpu"])
    torch.set_rng_state(torch.tensor(list(cpu), dtype=torch.uint8))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "numpy" in state:
        import numpy

        name, keys, position, has_gauss, gauss = state["numpy"]
        numpy.random.set_state(
            (name, numpy.array(keys, dtype=numpy.uint32), position, has_gauss, gauss)
        )


def _listed(value):
    """Tuples as lists, all the way down (JSON has no tuples)."""
    if isinstance(value, tuple | list):
        return [_listed(item) for item in value]
    return value
