"""transformers' native ``DistributedConfig`` (tensor parallel, FSDP2) compiled with backend="neuron".

torchrun, 2 processes, gloo on CPU: a tiny Llama checkpoint loaded with
``from_pretrained(..., distributed_config=DistributedConfig(tp_size=2))`` or ``(fsdp_size=2)``, no
other parallelism setup, compiled and trained 3 AdamW steps (``_dist_config_worker.py``). Per-step
losses equal the single-process eager run, nothing falls back (the tensor-parallel embedding's
``x[mask] = 0`` is a ``where``), and the ranks, sharing one cache dir, compile every graph once
(their misses together are exactly the entries on disk). ``Trainer`` itself is not used: Accelerate
refuses a ``ParallelismConfig`` on CPU processes (``DistributedType.MULTI_CPU``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

pytestmark = pytest.mark.slow
WORKER = Path(__file__).with_name("_dist_config_worker.py")


def _run(tmp_path: Path, kind: str, ckpt: Path) -> tuple[list[dict], Path]:
    out, cache = tmp_path / kind, tmp_path / f"cache_{kind}"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_INDUCTOR_", "_NEURON"))}
    env.update(NEURON_INDUCTOR_CACHE_DIR=str(cache), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    launch = [sys.executable] if kind == "single" else \
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    res = subprocess.run(launch + [str(WORKER), kind, str(ckpt), str(out)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))], cache


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    from _hf import tiny_llama
    tmp = tmp_path_factory.mktemp("dist_config")
    ckpt = tmp / "ckpt"
    tiny_llama().save_pretrained(ckpt)
    (single,), _ = _run(tmp, "single", ckpt)
    return ckpt, single["losses"]


@pytest.mark.parametrize("kind", ["tp", "fsdp"])
def test_distributed_config_trains_compiled_like_one_process(tmp_path, reference, kind):
    ckpt, want = reference
    ranks, cache = _run(tmp_path, kind, ckpt)
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    for r in ranks:
        torch.testing.assert_close(r["losses"], want, rtol=1e-5, atol=0.0)
        assert r["fallbacks"] == {} and r["graphs_compiled"] == r["misses"]
    # ATen-level entries (the Dynamo-level tier's entries hold a plan.json and no kernels)
    entries = sum(1 for m in cache.rglob("manifest.json") if not (m.parent / "plan.json").exists())
    assert sum(r["misses"] for r in ranks) == entries > 0  # each graph compiled once across ranks
