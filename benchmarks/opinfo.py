"""PyTorch's OpInfo database compiled with backend="neuron" vs eager, forward and gradients.

    python benchmarks/opinfo.py [--dtypes float32,bfloat16,int32,int64] [--samples 4] [--only add,mul]
                                [--shard 0/4] [--failures-only]

Each op's first ``--samples`` OpInfo samples run eagerly and compiled (tests/opinfo/sweep.py says
how); one line per sample that did not pass (``--failures-only`` hides declared fallbacks), then a
summary of outcomes. Exit status 1 when any sample gave a wrong number, an error, or a whole-graph
fallback. Needs ``expecttest`` (the ``test`` extra), which torch's OpInfo module imports.
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

from tests.fuzz.diff import Outcome  # noqa: E402
from tests.opinfo.sweep import cases, op_db, run_case  # noqa: E402

FAILING = ("compile-error", "sim-error", "error", "wrong-fwd", "wrong-grad", "graph-fallback")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="float32", help="comma-separated dtypes (default float32)")
    ap.add_argument("--samples", type=int, default=4, help="samples per op and dtype")
    ap.add_argument("--only", help="comma-separated OpInfo names")
    ap.add_argument("--shard", default="0/1", help="i/n: every n-th op starting at i")
    ap.add_argument("--no-grad", action="store_true")
    ap.add_argument("--failures-only", action="store_true")
    a = ap.parse_args(argv)
    os.environ.setdefault("NEURON_INDUCTOR_CACHE_DIR", os.path.join(os.getcwd(), ".opinfo-cache"))
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)
    import torch
    torch._logging.set_logs(dynamo=logging.CRITICAL, aot=logging.CRITICAL, inductor=logging.CRITICAL)
    torch._dynamo.config.recompile_limit = 64
    dtypes = [getattr(torch, d) for d in a.dtypes.split(",")]
    only = set(a.only.split(",")) if a.only else None
    i, n = map(int, a.shard.split("/"))
    ops = [op for k, op in enumerate(op_db()) if k % n == i and (only is None or op.name in only)]
    counts: Counter = Counter()
    bad_ops: dict[str, str] = {}
    t0 = time.time()
    for op in ops:
        for dtype in dtypes:
            for c in cases(op, dtype, grad=not a.no_grad, limit=a.samples):
                try:
                    out = run_case(c)
                except Exception as e:  # noqa: BLE001 - a sample the harness cannot judge
                    out = Outcome("invalid", f"harness: {type(e).__name__}: {e}")
                counts[out.kind] += 1
                if out.kind in FAILING:
                    bad_ops.setdefault(op.name, out.kind)
                if out.kind != "ok" and (out.kind in FAILING or not a.failures_only) and out.kind != "invalid":
                    print(f"{out.kind:14s} {c.describe()}: {out.detail}", flush=True)
        print(f"# {op.name} done at {time.time() - t0:.0f}s: {dict(counts)}", file=sys.stderr, flush=True)
    print(f"\n# {len(ops)} ops, {sum(counts.values())} samples in {time.time() - t0:.0f}s: "
          f"{dict(sorted(counts.items()))}")
    if bad_ops:
        print(f"# ops with a failing sample ({len(bad_ops)}): {', '.join(sorted(bad_ops))}")
    return 1 if bad_ops else 0


if __name__ == "__main__":
    sys.exit(main())
