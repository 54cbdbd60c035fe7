"""The framework of `gradient-doctor run` is read from the script's imports (and those of the
user's own modules it imports), never by importing it; a PyTorch run never loads TensorFlow."""

import subprocess
import sys

import pytest

from gradient_doctor.cli.framework_choice import (
    TENSORFLOW,
    TORCH,
    keras_backend,
    script_framework,
)
from tests.conftest import ROOT


def _script(tmp_path, source: str, modules: dict[str, str] | None = None):
    for name, text in (modules or {}).items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    script = tmp_path / "train.py"
    script.write_text(source)
    return str(script)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import torch\n", TORCH),
        ("from torch import nn\n", TORCH),
        ("def main():\n    import torch.optim as optim\n", TORCH),
        ("import tensorflow as tf\n", TENSORFLOW),
        ("import keras\nimport torch\n", TENSORFLOW),  # both: the TensorFlow adapter
        # Both, but it trains as PyTorch does (TensorFlow only for a summary or a tensor).
        ("import tensorflow as tf\nimport torch\nloss.backward()\nopt.zero_grad()\n", TORCH),
        # Both, and a GradientTape: TensorFlow trains (torch loads data, say).
        ("import tensorflow as tf\nimport torch\nx.backward()\ntf.GradientTape()\n", TENSORFLOW),
        ("import keras\nimport torch\nmodel.fit(x, y)\n", TENSORFLOW),
        ("import numpy\n", TENSORFLOW),  # neither: the doctor's first adapter
        ("import gradient_doctor.torch\n", TORCH),
        ('import importlib\ntorch = importlib.import_module("torch")\n', TORCH),
        ('nn = __import__("torch.nn")\n', TORCH),
        ('import importlib\nimportlib.import_module(".models", "pkg")\n', TENSORFLOW),
        ("this is not python\n", TENSORFLOW),
    ],
)
def test_the_scripts_own_imports_choose(tmp_path, source, expected):
    assert script_framework(_script(tmp_path, source)) == expected


@pytest.mark.parametrize(
    ("source", "backend"),
    [
        ('import os\nos.environ["KERAS_BACKEND"] = "torch"\nimport keras\n', TORCH),
        ('import os\nos.environ.setdefault("KERAS_BACKEND", "jax")\nimport keras\n', "jax"),
        ("import keras\n", TENSORFLOW),
    ],
)
def test_the_keras_backend_a_script_sets_itself_is_read(tmp_path, monkeypatch, source, backend):
    # Loading TensorFlow first would pin Keras to it: a torch-backend script must get the
    # torch adapter (before, it silently ran on TensorFlow under the doctor).
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    script = _script(tmp_path, source)
    assert keras_backend(script) == backend
    assert script_framework(script) == (TORCH if backend == TORCH else TENSORFLOW)


def test_the_environments_keras_backend_counts_when_the_script_sets_none(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    assert script_framework(_script(tmp_path, "import keras\n")) == TORCH


def test_a_module_of_the_users_folder_is_read_too(tmp_path):
    models = {"models.py": "import torch\nclass Net(torch.nn.Module):\n    pass\n"}
    assert script_framework(_script(tmp_path, "from models import Net\n", models)) == TORCH
    package = {"nets/__init__.py": "", "nets/layers.py": "from tensorflow import keras\n"}
    source = "import torch\nfrom nets import layers\n"
    assert script_framework(_script(tmp_path, source, package)) == TENSORFLOW


def test_a_torch_scripts_run_never_imports_tensorflow(tmp_path):
    script = ROOT / "tests/scripts/torch/healthy_accumulation.py"
    check = (
        "import sys\n"
        "from gradient_doctor.cli.main import main\n"
        f"status = main(['run', '--confirm', 'never', {str(script)!r}])\n"
        "loaded = sorted(m for m in ('tensorflow', 'keras', 'tf_keras') if m in sys.modules)\n"
        "print('status', status, 'loaded', loaded, 'torch', 'torch' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert "status 0 loaded [] torch True" in done.stdout, done.stderr[-2000:]
