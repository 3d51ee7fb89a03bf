"""Causal-LM architecture matrix: tiny random-weight models from transformers, compiled vs eager.

    python benchmarks/architectures.py [--only llama,gpt2] [--seq 300] [--dtypes float32,bfloat16] [--json]

Runs the checks of ``arch_checks.py`` (its docstring says what each column checks) for every
architecture and prints a table with one column per (dtype, padding side, check), the declared
fallback ops of all graphs, and the wall time. ``docs/results/architectures.md`` holds the last table.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from arch_checks import (ARCHS, BATCH, BF16_DRAWS, BF16_FACTOR, CHECKS, CORE, DTYPES, PAD_FRACTION, SEQ,
                         SHORT_SEQ, SIDES, SLIDING_WINDOW, Result, run_arch, seq_for)
from arch_table import mark, table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated architectures (default: all)")
    ap.add_argument("--checks", default=",".join(CHECKS), help="comma-separated subset of checks")
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated training dtypes")
    ap.add_argument("--sides", default=",".join(SIDES), help="padding sides of the training batch")
    ap.add_argument("--seq", type=int, default=None,
                    help=f"training sequence length (default {SEQ}; {SHORT_SEQ} for those rows)")
    ap.add_argument("--json", action="store_true", help="print JSON rows instead of the table")
    ap.add_argument("--errors", action="store_true", help="print each failure's message")
    args = ap.parse_args(argv)
    import logging
    logging.getLogger("neuron_inductor").setLevel(logging.ERROR)  # fallbacks are in the table
    archs = (list(CORE) if args.only == "core" else args.only.split(",")) if args.only else list(ARCHS)
    unknown = [a for a in archs if a not in ARCHS]
    if unknown:
        ap.error(f"unknown architecture(s) {unknown}; known: {', '.join(ARCHS)}")
    results = []
    for arch in archs:
        r = run_arch(arch, tuple(args.checks.split(",")), tuple(args.dtypes.split(",")),
                     tuple(args.sides.split(",")), args.seq)
        results.append(r)
        cells = " ".join(f"{c}={mark(v.get('fwd'))}/{mark(v.get('grads'))}" for c, v in r.train.items())
        print(f"{arch}: {cells} gen={mark(r.generate)} fallbacks={r.fallbacks} {r.seconds:.1f}s",
              file=sys.stderr, flush=True)
        if args.errors:
            for k, v in r.errors.items():
                print(f"    {k}: {v[:600]}", file=sys.stderr, flush=True)
            for k, v in r.noise.items():
                print(f"    {k} grads (within eager's bf16 spread): {v[:600]}", file=sys.stderr, flush=True)
            for k, v in r.ties.items():
                print(f"    {k} {'/'.join(r.tied[k])} (router tie; ok with routing pinned or exact ties "
                      f"reordered): {v[:600]}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps([dataclasses.asdict(r) | {"ok": r.ok} for r in results], indent=1))
    else:
        seqs = sorted({seq_for(a, args.seq) for a in archs})
        print(f"(seq {'/'.join(map(str, seqs))}, batch {BATCH}, row 1 padded by {PAD_FRACTION:.0%}; "
              f"sliding window {SLIDING_WINDOW})\n")
        print(table(results))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
