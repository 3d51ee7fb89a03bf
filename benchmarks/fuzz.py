"""Differential fuzzing: random programs compiled with backend="neuron" vs eager, forward and grads.

    python benchmarks/fuzz.py --n 2000 [--seed S] [--max-ops 6] [--no-grad] [--no-shrink]

Program ``k`` is ``tests.fuzz.gen.generate(S + k)``: the same seed gives the same program on every
machine. Each failure is printed as a minimal repro (shrunk while it still fails the same way) that
runs on its own; the summary counts outcomes by kind. Exit status 1 when anything failed.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzz.diff import run  # noqa: E402
from tests.fuzz.gen import generate, shrink  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="number of programs")
    ap.add_argument("--seed", type=int, default=0, help="seed of the first program")
    ap.add_argument("--max-ops", type=int, default=6)
    ap.add_argument("--max-numel", type=int, default=1 << 16)
    ap.add_argument("--no-grad", action="store_true", help="forward only")
    ap.add_argument("--no-shrink", action="store_true", help="print failing programs as generated")
    a = ap.parse_args(argv)
    os.environ.setdefault("NEURON_INDUCTOR_CACHE_DIR", os.path.join(os.getcwd(), ".fuzz-cache"))
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)
    import torch
    torch._logging.set_logs(dynamo=logging.CRITICAL, aot=logging.CRITICAL, inductor=logging.CRITICAL)
    counts: Counter = Counter()
    t0 = time.time()
    for k in range(a.n):
        seed = a.seed + k
        p = generate(seed, a.max_ops, a.max_numel)
        out = run(p, grad=not a.no_grad)
        counts[out.kind] += 1
        if out.failed:
            if not a.no_shrink:
                p = shrink(p, lambda q: run(q, grad=not a.no_grad).kind == out.kind)
                out = run(p, grad=not a.no_grad)
            print(f"\n### FAIL seed {seed}: {out.kind}: {out.detail}\n{p.source()}", flush=True)
        elif out.kind == "fallback":
            print(f"# seed {seed}: fallback: {out.detail}", flush=True)
        if (k + 1) % 25 == 0:
            print(f"# {k + 1}/{a.n} in {time.time() - t0:.0f}s: {dict(counts)}", file=sys.stderr, flush=True)
    print(f"\n# {a.n} programs (seeds {a.seed}..{a.seed + a.n - 1}) in {time.time() - t0:.0f}s: "
          f"{dict(sorted(counts.items()))}")
    return 1 if any(counts[k] for k in ("compile-error", "sim-error", "error", "wrong-fwd", "wrong-grad")) else 0


if __name__ == "__main__":
    sys.exit(main())
