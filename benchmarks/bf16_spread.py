"""bf16 gradient errors of one architecture over independent problems, compiled vs eager.

    python benchmarks/bf16_spread.py --arch doge --side left --draws 9 [--params self_attn.A]

For the matrix's tiny model (benchmarks/architectures.py) and its padded batch, each of this step
and ``--draws`` nearby problems (fresh tokens at the batch's real positions, weights jittered by
about one bf16 ulp; ``arch_checks.error_spread``) is run in fp32 (reference), eager bf16 and
compiled bf16; it prints, per parameter, the rms over the problems of each bf16 run's relative
gradient error against its reference. A compiled rms well above eager's points at a precision
bug; two similar rms values far from zero point at an ill-conditioned gradient (one step's
single-sample errors decide nothing there).
"""
from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import arch_checks as A  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", required=True, choices=list(A.ARCHS))
    ap.add_argument("--side", default="left", choices=A.SIDES)
    ap.add_argument("--draws", type=int, default=A.BF16_DRAWS, help="nearby problems besides this step")
    ap.add_argument("--params", default="", help="only parameters whose name contains this")
    ap.add_argument("--seq", type=int, default=A.SEQ)
    args = ap.parse_args(argv)
    logging.getLogger("neuron_inductor").setLevel(logging.ERROR)
    model = A.build(args.arch)
    names = [n for n, _ in model.named_parameters() if args.params in n]
    with tempfile.TemporaryDirectory(prefix="spread_cache_") as cache_dir:
        spread = A.error_spread(model, A.padded_batch(args.seq, args.side), names, args.draws, cache_dir)
    print(f"{args.arch} bf16 {args.side}-padded, rms relative gradient error vs fp32 over "
          f"{args.draws + 1} problems")
    print(f"{'parameter':60s} {'eager':>9s} {'compiled':>9s}")
    for n, (e, c) in spread.items():
        flag = "  <<" if c > A.BF16_FACTOR * e + A.BF16_FLOOR else ""
        print(f"{n:60s} {e:9.3g} {c:9.3g}{flag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
