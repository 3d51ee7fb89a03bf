"""torchrun, 2 processes, gloo on CPU: DDP and DTensor tensor-parallel (and FSDP2) models compiled
with backend="neuron" give the uncompiled results (forward loss and every gradient, checked in
``_dist_worker.py``), functional collectives in the graph run as declared collectives (not
fallbacks), and the ranks share one cache dir in which every graph is compiled exactly once."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
WORKER = Path(__file__).with_name("_dist_worker.py")


def _torchrun(tmp_path: Path, *kinds: str) -> tuple[list[dict], Path]:
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_INDUCTOR_", "_NEURON"))}
    env.update(NEURON_INDUCTOR_CACHE_DIR=str(cache), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(WORKER), *kinds]
    res = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    ranks = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank*.json"))]
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    return ranks, cache


def _entries(cache: Path) -> int:
    """ATen-level entries (the Dynamo-level tier's entries hold a plan.json and no kernels)."""
    return sum(1 for m in cache.rglob("manifest.json") if not (m.parent / "plan.json").exists())


def _compiled_once(ranks: list[dict], cache: Path) -> None:
    """Single flight: the misses of all ranks together are exactly the entries on disk."""
    misses = sum(r["misses"] for r in ranks)
    assert misses == _entries(cache) > 0
    assert all(r["misses"] + r["hits"] >= 2 for r in ranks)  # forward + backward on every rank


def test_ddp_and_tensor_parallel(tmp_path):
    ranks, cache = _torchrun(tmp_path, "ddp", "tp")
    _compiled_once(ranks, cache)
    for r in ranks:
        assert r["fallbacks"] == {}
        # TP's RowwiseParallel all-reduces inside the graph: a declared collective on every rank
        assert r["collectives"].get("_c10d_functional.all_reduce.default", 0) >= 1
        assert r["collectives"].get("_c10d_functional.wait_tensor.default", 0) >= 1


def test_fsdp2(tmp_path):
    """FSDP2 frees unsharded parameters with storage().resize_(0): kernel inputs and outputs must
    keep ordinary, resizable torch storage (the simulator once exported them to numpy)."""
    ranks, cache = _torchrun(tmp_path, "fsdp2")
    _compiled_once(ranks, cache)
