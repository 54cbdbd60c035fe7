"""The knowledge base imports no framework and no numpy."""

import subprocess
import sys


def test_importing_the_knowledge_base_loads_no_framework():
    code = (
        "import sys, gradient_doctor.core.knowledge\n"
        "loaded = {'tensorflow', 'keras', 'numpy', 'torch', 'jax'} & set(sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
