"""Every stage imports on its own, in any order (a fresh interpreter per module)."""
import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["neuron_inductor.graph.fusion", "neuron_inductor.lowering",
                                    "neuron_inductor.lowering.graph", "neuron_inductor.compile",
                                    "neuron_inductor.backend", "neuron_inductor.pipeline",
                                    "neuron_inductor.stats"])
def test_module_imports_first(module):
    r = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
