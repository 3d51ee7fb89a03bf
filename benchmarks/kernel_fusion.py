"""Fusion at a glance: kernels generated vs ATen ops, HBM traffic vs the unfused program, and kernel
launches vs TorchInductor.

Compiles the plain-torch transformer block (forward + backward) three times in one run: fused and with
fusion off (one training step of each in the simulator: kernel counts and the DMA bytes the simulator
counted), and with TorchInductor on CPU, whose generated code is read for its launches per step
(generated kernels called plus extern calls: matmuls and aten fallbacks such as SDPA).
Run: ``python benchmarks/kernel_fusion.py [--seq 128]``.
"""
from __future__ import annotations

import argparse
import os
import tempfile

import torch

from _models import TransformerBlock


def measure(fusion: bool, seq: int) -> dict:
    from neuron_inductor import stats
    from neuron_inductor.runtime import sim

    torch._dynamo.reset()
    stats.reset("compile", "fallback_ops")
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
    return {"kernels": stats.compiled()["kernels_generated"], "aten_ops": stats.compiled()["aten_ops"],
            "launches": c.kernel_calls, "dma_bytes": c.dma_bytes_loaded + c.dma_bytes_stored,
            "fallbacks": sum(stats.fallback_ops().values())}


def inductor_launches(seq: int) -> dict:
    """Launches per fwd+bwd step of the same block compiled by TorchInductor (CPU): the calls in
    the generated ``call`` functions of both graphs, split into its own kernels and extern calls."""
    import re

    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = TransformerBlock()
    x = torch.randn(2, seq, 64, requires_grad=True)
    cm = torch.compile(model, backend="inductor")

    def step():
        cm(x).sum().backward()
    _, codes = run_and_get_code(step)
    kernels = extern = 0
    for code in codes:
        body = code[code.index("def call("):] if "def call(" in code else ""
        body = body[:body.index("\ndef ", 1)] if "\ndef " in body[1:] else body
        names = set(re.findall(r"^(\w+) = async_compile\.", code, re.M))
        kernels += sum(len(re.findall(rf"\b{re.escape(n)}\(", body)) for n in names)
        extern += len(re.findall(r"\bextern_kernels\.\w+\(", body))
        extern += len(re.findall(r"\btorch\.ops\.aten\.\w+\.\w+\(", body))
    return {"kernels": kernels, "extern": extern, "launches": kernels + extern}


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
    ind = inductor_launches(args.seq)
    print(f"TorchInductor (CPU) launches/step: {ind['launches']} ({ind['kernels']} generated kernels + "
          f"{ind['extern']} extern calls); ours {fused['launches']} = "
          f"{fused['launches'] / ind['launches']:.2f}x (target <= 0.6x); DMA bytes "
          f"{fused['dma_bytes'] / unfused['dma_bytes']:.2f}x unfused (target <= 0.55x)")


if __name__ == "__main__":
    main()
