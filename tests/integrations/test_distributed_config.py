"""transformers' native ``DistributedConfig`` (tensor parallel, FSDP2) compiled with backend="neuron".

torchrun, 2 processes, gloo on CPU: a tiny Llama checkpoint loaded with
``from_pretrained(..., distributed_config=DistributedConfig(tp_size=2))`` or ``(fsdp_size=2)``, no
other parallelism setup, compiled and trained 3 AdamW steps (``_dist_config_worker.py``). Per-step
losses equal the single-process eager run, nothing falls back (the tensor-parallel embedding's
``x[mask] = 0`` is a ``where``), and the ranks, sharing one cache dir, compile every graph once
(their misses together are exactly the entries on disk). The same through an unmodified
``Trainer(torch_compile=True)`` (``_dist_config_trainer_worker.py``): ``fsdp_size=2`` trains like one
process; ``tp_size=2`` is refused by Accelerate on CPU processes: ``Trainer`` hands it a
``ParallelismConfig(tp_size=2)``, which ``ParallelismConfig._validate_accelerator`` accepts only for
FSDP2, DeepSpeed or a ``MULTI_<accelerator>`` distributed type, never ``MULTI_CPU`` (a Trainium host
is ``MULTI_NEURON``).
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
TRAINER_WORKER = Path(__file__).with_name("_dist_config_trainer_worker.py")


def _launch(tmp_path: Path, kind: str, ckpt: Path, worker: Path = WORKER):
    out, cache = tmp_path / kind, tmp_path / f"cache_{kind}"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_INDUCTOR_", "_NEURON"))}
    env.update(NEURON_INDUCTOR_CACHE_DIR=str(cache), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    launch = [sys.executable] if kind == "single" else \
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    res = subprocess.run(launch + [str(worker), kind, str(ckpt), str(out)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    return res, out, cache


def _run(tmp_path: Path, kind: str, ckpt: Path, worker: Path = WORKER) -> tuple[list[dict], Path]:
    res, out, cache = _launch(tmp_path, kind, ckpt, worker)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))], cache


def _entries(cache: Path) -> int:
    """ATen-level entries (the Dynamo-level tier's entries hold a plan.json and no kernels)."""
    return sum(1 for m in cache.rglob("manifest.json") if not (m.parent / "plan.json").exists())


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
    assert sum(r["misses"] for r in ranks) == _entries(cache) > 0  # each graph compiled once across ranks


def test_trainer_with_fsdp_distributed_config_trains_compiled_like_one_process(tmp_path):
    """``Trainer(torch_compile=True)`` on a ``DistributedConfig(fsdp_size=2)`` model: the logged losses
    equal one eager process training on both ranks' rows, nothing falls back, one build per graph."""
    from _hf import tiny_llama
    ckpt = tmp_path / "ckpt"
    tiny_llama().save_pretrained(ckpt)
    (single,), _ = _run(tmp_path, "single", ckpt, TRAINER_WORKER)
    ranks, cache = _run(tmp_path, "fsdp", ckpt, TRAINER_WORKER)
    assert sorted(r["rank"] for r in ranks) == [0, 1] and len(single["losses"]) == 3
    for r in ranks:
        torch.testing.assert_close(r["losses"], single["losses"], rtol=1e-4, atol=0.0)
        assert r["fallbacks"] == {} and r["graphs_compiled"] == r["misses"]
    assert sum(r["misses"] for r in ranks) == _entries(cache) > 0


def test_trainer_with_tp_distributed_config_is_refused_by_accelerate_on_cpu(tmp_path):
    """Records the one blocked combination and its cause, so an Accelerate release that lifts it
    shows up here: ``Trainer`` passes ``ParallelismConfig(tp_size=2)`` to ``Accelerator``, whose
    validation rejects ``DistributedType.MULTI_CPU`` before any step runs."""
    from _hf import tiny_llama
    ckpt = tmp_path / "ckpt"
    tiny_llama().save_pretrained(ckpt)
    res, _, _ = _launch(tmp_path, "tp", ckpt, TRAINER_WORKER)
    assert res.returncode != 0
    assert "ParallelismConfig is only compatible" in res.stderr and "MULTI_CPU" in res.stderr, \
        res.stderr[-4000:]
