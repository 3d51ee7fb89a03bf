"""Cost model vs the published NKI matmul tutorial: [4096, 8192] @ [8192, 8192] bf16, one trn1 NeuronCore.

    python benchmarks/matmul_tutorial.py [--target trn1|trn2|trn3]

Prints predicted vs published latency, TensorE utilization and HFU per tutorial kernel, then the
model's full per-kernel table. The kernels are built as tile IR by tests/costmodel/tutorial_kernels.py.
Published numbers are for trn1; on trn2 and trn3 only the prediction is shown.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "costmodel"))

from neuron_inductor.costmodel import estimate_program, format_cost_table  # noqa: E402
from neuron_inductor.target import get_target  # noqa: E402
from tutorial_kernels import PUBLISHED_HFU, PUBLISHED_MS, all_kernels  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="trn1", choices=("trn1", "trn2", "trn3"))
    args = ap.parse_args(argv)
    target = get_target(args.target)
    costs = estimate_program(all_kernels(), target)
    published = target.name == "trn1"
    print(f"NKI matmul tutorial, [4096,8192] @ [8192,8192] bf16, one {target.name} NeuronCore")
    hdr = f"{'kernel':<20} {'predicted':>12}"
    if published:
        hdr += f" {'published':>12} {'error':>8}"
    hdr += f" {'TensorE util':>13} {'HFU model':>10}"
    if published:
        hdr += f" {'HFU published':>14}"
    print(hdr)
    worst = 0.0
    for k in costs.kernels:
        row = f"{k.name:<20} {k.seconds * 1e3:9.2f} ms"
        if published:
            err = k.seconds * 1e3 / PUBLISHED_MS[k.name] - 1
            worst = max(worst, abs(err))
            row += f" {PUBLISHED_MS[k.name]:9.2f} ms {100 * err:+7.1f}%"
        row += f" {100 * k.utilization['tensor']:12.1f}% {100 * k.mfu:9.1f}%"
        if published:
            row += f" {100 * PUBLISHED_HFU[k.name]:13.2f}%"
        print(row)
    if published:
        times = [k.seconds for k in costs.kernels]
        order_ok = times == sorted(times, reverse=True)
        print(f"worst error {100 * worst:.1f}% (bar: 30%), order {'matches' if order_ok else 'DIFFERS'}")
    print()
    print(format_cost_table(costs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
