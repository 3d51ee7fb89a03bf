"""Bucketed lengths compile once per bucket, then never again in a new process.

64 random lengths padded by BucketingCollator (1..128 to multiples of 16: 8 buckets, the same
arithmetic as 1..1024 to multiples of 128 at a size the simulator runs quickly). Dynamo's default
automatic dynamic captures the first shape statically and every later one through one symbolic graph,
which the backend specialises per bucket; both flavours of the first bucket must share one cache key,
so the compile count is exactly the bucket count, with Dynamo's default recompile_limit.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from _bucket_worker import MAX_LEN, MULTIPLE, run_buckets  # noqa: E402

WORKER = str(Path(__file__).with_name("_bucket_worker.py"))


def test_bucketed_llama_compiles_once_per_bucket_then_never(cache_dir):
    first = run_buckets()
    n_buckets = MAX_LEN // MULTIPLE
    assert first["buckets"] == [MULTIPLE * (i + 1) for i in range(n_buckets)]  # all 8 were seen
    assert first["calls"] == 64
    # one compile per bucket: the static capture of the first shape and its symbolic
    # specialisation share a key (the second is a memory hit, not a compile)
    assert first["cache"]["misses"] == n_buckets <= 8
    assert first["graphs_compiled"] == n_buckets
    assert first["cache"]["hits_memory"] >= 1
    # two Dynamo graphs (static first shape + symbolic), far under the default recompile_limit
    assert first["dynamo_graphs"] <= 2

    p = subprocess.run([sys.executable, WORKER, "forbid", first["fingerprint"]],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    second = json.loads(p.stdout.strip().splitlines()[-1])
    assert second["cache"]["misses"] == 0 and second["graphs_compiled"] == 0
    assert second["cache"]["hits_disk"] == n_buckets
    assert second["buckets"] == first["buckets"]
