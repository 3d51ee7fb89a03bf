"""Packaging: the entry points torch and the shell look for resolve, and `import torch` stays cheap."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import torch

import neuron_inductor

ROOT = Path(__file__).resolve().parents[1]


def _eps(group: str) -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=group)
            if ep.value.startswith("neuron_inductor")}


def test_installed_version_matches_package():
    assert metadata.version("neuron_inductor") == neuron_inductor.__version__


def test_declared_dependencies_and_extras():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {d.split(">")[0].split("=")[0].split("<")[0].strip() for d in project["dependencies"]}
    assert names == {"torch", "sympy", "networkx", "numpy", "filelock", "ml_dtypes"}
    assert "torch>=2.13,<2.16" in project["dependencies"]
    extras = project["optional-dependencies"]
    assert {"pytest", "hypothesis"} <= set(extras["test"])
    assert "transformers" in extras["hf"]


@pytest.mark.smoke
def test_running_torch_is_in_the_supported_range():
    from packaging.requirements import Requirement
    from packaging.version import Version

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (torch_req,) = [Requirement(d) for d in project["dependencies"] if d.startswith("torch")]
    assert Version(torch.__version__).public in torch_req.specifier, (torch.__version__, str(torch_req))


def test_dynamo_backend_entry_points():
    eps = _eps("torch_dynamo_backends")
    assert {n: e.value for n, e in eps.items()} == {
        "neuron": "neuron_inductor.backend:neuron_backend",
        "neuron_inductor": "neuron_inductor.backend:neuron_backend"}
    assert callable(eps["neuron"].load())


def test_console_script_and_autoload_entry_points():
    from neuron_inductor import _autoload, cli

    assert _eps("console_scripts")["neuron-inductor"].load() is cli.main
    assert _eps("torch.backends")["neuron_inductor"].load() is _autoload.autoload


def test_console_script_prints_version(tmp_path):
    script = Path(sys.executable).parent / "neuron-inductor"
    assert script.exists(), "console script not installed next to the interpreter"
    res = subprocess.run([str(script), "--version"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"neuron-inductor {neuron_inductor.__version__}"


def test_import_torch_runs_our_hook_and_stays_light(tmp_path):
    """torch calls our hook during `import torch`; it must not drag in torch._dynamo or the compiler
    (that would cost a second on every import and run with torch half-initialised)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_INDUCTOR_", "_NEURON"))}
    env.update(TORCH_DEVICE_BACKEND_AUTOLOAD="1", NEURON_INDUCTOR_HOST="trn2")
    code = ("import json, sys, torch; print(json.dumps(sorted(m for m in sys.modules "
            "if m.startswith(('neuron_inductor', 'torch._dynamo', 'transformers')))))")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    loaded = set(json.loads(res.stdout.strip().splitlines()[-1]))
    assert "neuron_inductor._autoload" in loaded  # the hook ran
    assert loaded <= {"neuron_inductor", "neuron_inductor._autoload", "neuron_inductor.autoselect"}
