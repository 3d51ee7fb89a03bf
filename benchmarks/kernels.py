"""Fusion at a glance: kernels generated vs ATen ops, and HBM traffic vs the unfused program.

Compiles the plain-torch transformer block (forward + backward) twice in one run, fused and with
fusion off, runs one training step of each in the simulator, and prints the kernel counts and the DMA
bytes the simulator counted. Run: ``python benchmarks/kernels.py [--seq 128]``.
"""
from __future__ import annotations

import argparse
import os
import tempfile

import torch

from _models import TransformerBlock


def measure(fusion: bool, seq: int) -> dict:
    from neuron_inductor import compile as nic
    from neuron_inductor.runtime import sim

    torch._dynamo.reset()
    nic.reset_counters()
    torch.manual_seed(0)
    model = TransformerBlock()
    x = torch.randn(2, seq, 64, requires_grad=True)
    cm = torch.compile(model, backend="neuron", options={"fusion": fusion, "cache": False})
    out = cm(x)                      # compile (forward + backward graphs)
    out.sum().backward()
    sim.reset_counters()
    out = cm(x)                      # one measured training step
    out.sum().backward()
    c = sim.counters()
    return {"kernels": nic.counters["kernels_generated"], "aten_ops": nic.counters["aten_ops"],
            "launches": c.kernel_calls, "dma_bytes": c.dma_bytes_loaded + c.dma_bytes_stored,
            "fallbacks": sum(nic.fallback_ops.values())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seq", type=int, default=128)
    args = ap.parse_args()
    os.environ.setdefault("NEURON_INDUCTOR_CACHE_DIR", tempfile.mkdtemp())
    fused, unfused = measure(True, args.seq), measure(False, args.seq)
    print(f"transformer block (d=64, 4 heads, SwiGLU 176, batch 2, seq {args.seq}), fwd+bwd, trn2 sim")
    print(f"{'':22}{'fused':>14}{'unfused':>14}{'ratio':>8}")
    for k, label in [("aten_ops", "ATen ops in graphs"), ("kernels", "kernels generated"),
                     ("launches", "kernel launches/step"), ("dma_bytes", "HBM bytes/step (DMA)"),
                     ("fallbacks", "fallback ops")]:
        a, b = fused[k], unfused[k]
        ratio = f"{a / b:.2f}" if b else "-"
        print(f"{label:22}{a:>14,}{b:>14,}{ratio:>8}")
    print(f"kernels / ATen ops (fused): {fused['kernels'] / fused['aten_ops']:.2f}")


if __name__ == "__main__":
    main()
