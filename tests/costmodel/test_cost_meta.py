"""The cost model's verdict is stored in every compiled entry and printed by `cache show --cost`."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

SCRIPT = shutil.which("neuron-inductor", path=os.path.dirname(sys.executable))
CMD = [SCRIPT] if SCRIPT else [sys.executable, "-m", "neuron_inductor.cli"]


def _f(x, w):
    return torch.relu(x @ w).sum(-1)


@pytest.fixture
def entry(tmp_path, monkeypatch):
    from neuron_inductor import config
    from neuron_inductor.cache import Store, clear_memory

    d = tmp_path / "cache"
    monkeypatch.setenv("NEURON_INDUCTOR_CACHE_DIR", str(d))
    monkeypatch.setenv("NEURON_INDUCTOR_TARGET", "trn2")
    config.reset()
    clear_memory()
    torch._dynamo.reset()
    torch.compile(_f, backend="neuron")(torch.randn(130, 200), torch.randn(200, 600))
    clear_memory()
    config.reset()
    (e,) = [e for e in Store(d).entries() if e.read_json("meta.json").get("kind") != "dynamo"]
    return d, e


def test_meta_cost_per_kernel(entry):
    _, e = entry
    meta = e.read_json("meta.json")
    cost = meta["cost"]
    assert cost["target"] == "trn2" and cost["total"]["n_kernels"] == meta["n_kernels"] == len(cost["kernels"])
    names = [k["name"] for k in cost["kernels"]]
    assert any("mm" in n for n in names)
    for k in cost["kernels"]:
        assert k["seconds"] > 0 and k["bound"] in ("compute", "memory", "overhead")
        assert set(k["utilization"]) == {"tensor", "vector", "scalar", "gpsimd", "dma"}
        assert all(0.0 <= u <= 1.0 for u in k["utilization"].values())
        assert k["hbm_bytes"] > 0
    mm = next(k for k in cost["kernels"] if "mm" in k["name"])
    assert mm["matmul_flops"] == 2 * 130 * 200 * 600
    assert cost["total"]["seconds"] == pytest.approx(sum(k["seconds"] for k in cost["kernels"]))
    # always on, so it must stay a small part of the compile
    assert cost["model_seconds"] < max(0.5, meta["compile_seconds"])


def test_cache_show_cost_prints_table(entry):
    d, e = entry
    p = subprocess.run([*CMD, "cache", "--cache-dir", str(d), "show", e.key[:10], "--cost"],
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert any(l.startswith("kernel") and "bound" in l and "tensor" in l and "MFU" in l for l in lines)
    cost = e.read_json("meta.json")["cost"]
    for k in cost["kernels"]:
        assert any(l.startswith(k["name"]) for l in lines), p.stdout
    assert any(l.startswith("total") and f"{len(cost['kernels'])} kernel(s)" in l for l in lines)
    js = json.loads(subprocess.run([*CMD, "cache", "--cache-dir", str(d), "show", e.key[:10], "--cost",
                                    "--json"], capture_output=True, text=True, timeout=120).stdout)
    assert js["cost"]["kernels"] == cost["kernels"]


def test_pricing_failure_never_fails_compile(monkeypatch):
    from neuron_inductor import pipeline
    from neuron_inductor.config import get_config
    from neuron_inductor.costmodel import model

    def boom(*a, **k):
        raise RuntimeError("no price")
    monkeypatch.setattr(model, "estimate_program", boom)
    assert pipeline._model_cost([], get_config()) == {"error": "RuntimeError: no price"}
