"""The framework-neutral half imports no framework: every module of `core` and `render`."""

import subprocess
import sys

# Imports each module named on the command line (a package's modules too, one by one)
# in this fresh interpreter, and prints the first one after which a framework is
# loaded, with the frameworks it loaded; else how many modules it imported.
_CHECK = """
import importlib, pkgutil, sys
FRAMEWORKS = {"tensorflow", "keras", "numpy", "torch", "jax"}
pending, count = list(sys.argv[1:]), 0
while pending:
    name = pending.pop(0)
    module = importlib.import_module(name)
    count += 1
    loaded = FRAMEWORKS & {m.split(".")[0] for m in sys.modules}
    if loaded:
        print(f"importing {name} loaded {sorted(loaded)}")
        sys.exit(1)
    if hasattr(module, "__path__"):  # a package: its modules next (found without importing)
        pending += [f"{name}.{m.name}" for m in pkgutil.iter_modules(module.__path__)]
print(count)
"""


def _check(*packages: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _CHECK, *packages], capture_output=True, text=True, timeout=120
    )


def test_no_module_of_core_or_render_loads_a_framework():
    done = _check("gradient_doctor.core", "gradient_doctor.render")
    assert done.returncode == 0, done.stdout + done.stderr
    assert int(done.stdout) > 60  # every module was imported, not only the packages


def test_the_check_names_a_module_that_loads_a_framework():
    done = _check("gradient_doctor.core.findings", "numpy")
    assert done.returncode == 1
    assert done.stdout.strip() == "importing numpy loaded ['numpy']"
