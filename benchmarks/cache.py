"""First-call time of a tiny Llama forward+backward in fresh processes: cold, warm, and the floor.

    python benchmarks/cache.py [--seq 128] [--repeats 1] [--skip-buckets]

Prints, in one run:
  cold      backend="neuron", empty cache: Dynamo + AOTAutograd + our whole pipeline
  warm      backend="neuron", populated cache: every graph is a disk hit, no lowering runs
  floor     backend="aot_eager": Dynamo + AOTAutograd with no backend work at all; no backend can
            start faster than this. Goal: warm <= 1.2x floor.
and the number of compiles for 64 random lengths in 1..1024 under 128-token bucketing (at most 8),
then again in a second process (0: all hits).

Every measurement runs in its own interpreter so import and first-use costs are real. Times are
wall clock of the first ``loss.backward()`` step, measured inside the child after imports (import
torch is the same for every variant and would only add noise).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

CHILD = textwrap.dedent("""
    import json, os, random, sys, time
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    mode, backend, seq = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    model = LlamaForCausalLM(cfg)
    out = {}
    if mode == "step":
        ids = torch.randint(0, 256, (1, seq))
        t0 = time.perf_counter()
        compiled = torch.compile(model, backend=backend)
        loss = compiled(input_ids=ids, labels=ids).loss
        loss.backward()
        out["seconds"] = time.perf_counter() - t0
    else:  # buckets: 64 random lengths, padded to multiples of 128, forward only
        from neuron_inductor.bucketing import bucket, recommended_recompile_limit
        torch._dynamo.config.recompile_limit = recommended_recompile_limit(1024) + 2
        rng = random.Random(0)
        compiled = torch.compile(model.eval(), backend=backend)
        seen = set()
        with torch.no_grad():
            for n in (rng.randint(1, 1024) for _ in range(64)):
                seen.add(bucket(n))
                compiled(input_ids=torch.randint(0, 256, (1, bucket(n))))
        out["buckets"] = len(seen)
    if backend == "neuron":
        from neuron_inductor.cache import stats
        out["cache"] = stats()
    print("RESULT " + json.dumps(out))
""")


def child(mode: str, backend: str, seq: int, cache_dir: str) -> dict:
    env = dict(os.environ, NEURON_INDUCTOR_CACHE_DIR=cache_dir)
    p = subprocess.run([sys.executable, "-c", CHILD, mode, backend, str(seq)], capture_output=True,
                       text=True, env=env)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{mode}/{backend} child failed (rc {p.returncode}):\n{p.stderr[-3000:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=1, help="warm/floor runs to take the best of")
    ap.add_argument("--skip-buckets", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        cold = child("step", "neuron", args.seq, cache)
        warm = min((child("step", "neuron", args.seq, cache) for _ in range(args.repeats)),
                   key=lambda r: r["seconds"])
        floor = min((child("step", "aot_eager", args.seq, cache) for _ in range(args.repeats)),
                    key=lambda r: r["seconds"])
        print(f"tiny Llama fwd+bwd, seq {args.seq}, first call in a fresh process:")
        print(f"  cold  (neuron, empty cache)   {cold['seconds']:8.2f} s   "
              f"misses {cold['cache']['misses']}, hits {cold['cache']['hits']}")
        print(f"  warm  (neuron, populated)     {warm['seconds']:8.2f} s   "
              f"misses {warm['cache']['misses']}, hits {warm['cache']['hits']}")
        print(f"  floor (aot_eager)             {floor['seconds']:8.2f} s")
        ratio = warm["seconds"] / floor["seconds"]
        print(f"  warm / floor = {ratio:.2f}x  (goal <= 1.2x)")
        if not args.skip_buckets:
            bcache = os.path.join(tmp, "buckets")
            first = child("buckets", "neuron", 0, bcache)["cache"]
            second = child("buckets", "neuron", 0, bcache)["cache"]
            print("64 random lengths in 1..1024, bucketed to multiples of 128 (forward):")
            print(f"  first process   compiles {first['misses']}  (at most 8 expected)")
            print(f"  second process  compiles {second['misses']}, disk hits {second['hits_disk']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
