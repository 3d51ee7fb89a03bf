"""The command line: exit codes, --version, and what doctor reports (as JSON, which scripts read)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import neuron_inductor
from neuron_inductor import autoselect, cli, config


@pytest.fixture
def env(tmp_path, monkeypatch):
    for name in list(os.environ):
        if name.startswith("NEURON_INDUCTOR_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("NEURON_INDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    config.reset()
    autoselect.reset_detection()
    yield tmp_path
    config.reset()
    autoselect.reset_detection()


def _doctor(capsys) -> tuple[int, dict]:
    rc = cli.main(["doctor", "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"neuron-inductor {neuron_inductor.__version__}"


@pytest.mark.parametrize("argv", [[], ["no-such-command"], ["doctor", "--no-such-flag"]])
def test_usage_errors_exit_2(argv, capsys):
    assert cli.main(argv) == 2
    assert "usage:" in capsys.readouterr().err


@pytest.mark.smoke
def test_doctor_reports_declared_host_target_and_versions(env, monkeypatch, capsys):
    monkeypatch.setenv("NEURON_INDUCTOR_HOST", "trn1")
    monkeypatch.setenv("NEURON_INDUCTOR_TARGET", "trn1")
    rc, rep = _doctor(capsys)
    assert rep["host"] == {"kind": "trn1", "source": "env", "evidence": ["NEURON_INDUCTOR_HOST=trn1"]}
    assert rep["target"] == {"name": "trn1", "source": "NEURON_INDUCTOR_TARGET"}
    assert rep["versions"]["torch"] == torch.__version__
    assert rep["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert rep["neuron_inductor"]["version"] == neuron_inductor.__version__
    assert rep["backend"]["registered"] == {"neuron": True, "neuron_inductor": True}
    assert rep["autoload"]["entry_point"] == "neuron_inductor._autoload:autoload"
    assert rc == (1 if rep["problems"] else 0)


def test_doctor_runtime_is_simulator_off_trainium(env, monkeypatch, capsys):
    monkeypatch.setenv("NEURON_INDUCTOR_HOST", "none")
    _, rep = _doctor(capsys)
    assert rep["host"]["kind"] is None
    assert rep["runtime"]["mode"] == "simulator"


def test_doctor_flags_device_runtime_without_hardware(env, monkeypatch, capsys):
    from neuron_inductor.runtime import nki

    if nki.probe().usable:
        pytest.skip("a real Neuron device and toolchain are present")
    monkeypatch.setenv("NEURON_INDUCTOR_RUNTIME", "device")
    config.reset()
    rc, rep = _doctor(capsys)
    assert rep["runtime"]["mode"] == "unavailable"
    assert rc == 1 and any(p.startswith("runtime:") for p in rep["problems"])


def test_doctor_cache_dir_not_yet_created(env, capsys):
    _, rep = _doctor(capsys)
    cache = rep["cache"]
    assert cache["dir"] == str(env / "cache")
    assert cache["exists"] is False and cache["writable"] is True
    assert not (env / "cache").exists()  # doctor looks, it does not create


def test_doctor_flags_a_shared_cache_dir(env, capsys):
    (env / "cache").mkdir(mode=0o700)
    os.chmod(env / "cache", 0o777)
    rc, rep = _doctor(capsys)
    assert rep["cache"]["secure"] is False
    assert any("cache" in p for p in rep["problems"]) and rc == 1
    os.chmod(env / "cache", 0o700)
    rc, rep = _doctor(capsys)
    assert rep["cache"]["secure"] is True and rep["cache"]["writable"] is True


def test_doctor_text_output(env, capsys):
    cli.main(["doctor"])
    out = capsys.readouterr().out
    for label in ("target", "runtime", "host", "torch", "dir", "torch.compile default"):
        assert label in out


def test_cache_commands_are_wired(capsys):
    assert cli.main(["cache", "--help"]) == 0
    assert "cache" in capsys.readouterr().out


def test_python_dash_m(tmp_path):
    res = subprocess.run([sys.executable, "-m", "neuron_inductor.cli", "--version"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"neuron-inductor {neuron_inductor.__version__}"


def test_ops_lists_lowered_families():
    from neuron_inductor.cli import main, supported_ops
    ops = supported_ops()
    assert "mm" in ops["kernels"] and "exp" in ops["pointwise"] and "sum" in ops["reductions"]
    assert "permute" in ops["views (access patterns, no kernel)"]
    assert main(["ops", "--json"]) == 0


def test_ops_lists_selections_scatters_and_random_ops():
    from neuron_inductor.cli import supported_ops
    ops = supported_ops()
    decomposed = set(ops["decomposed first"])
    for name in ("max", "min", "argmax", "argmin", "topk", "scatter", "scatter_add", "gather",
                 "rand_like", "rand", "uniform", "bernoulli", "native_dropout"):
        assert name in decomposed, name
    assert "__rshift__" in ops["pointwise"]
