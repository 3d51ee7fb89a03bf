"""One decode step of the Llama-7B-shaped layer against its HBM roofline.

    .venv/bin/python benchmarks/decode_step.py [--target trn2] [--batch 1 8] [--cache 2048]

The layer of benchmarks/decoder_layer.py (hidden 4096, 32 heads of 128, SwiGLU 11008, RMSNorm,
rotary; bf16) takes one new token per sequence and attends over a static KV cache of ``--cache``
positions (keys and values of earlier tokens, masked by an additive mask, plus the new token's own
key and value). Writing the new token's key and value into the cache is one row per head, left to
the caller (it is 0.01% of the bytes). The step is traced on fake tensors, lowered by the real passes
and priced by the calibrated cost model; nothing runs.

Roofline: a decode step must read every weight and the whole cache once; at batch 1 and 8 that
dominates everything else, so the bound is ``(weights + KV cache + activations) / HBM bandwidth`` of
one NeuronCore. Printed: modelled time, roofline time and their ratio (target: modelled within 1/0.8
of the roofline at batch 1, i.e. >= 80% of it).
"""
from __future__ import annotations

import argparse
import math
import sys

import torch

BF16 = torch.bfloat16
D, H, HD, FF = 4096, 32, 128, 11008


def _rms(x, w):
    xf = x.float()
    return (xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * w


def _rot(x, cos, sin):
    x1, x2 = x[..., :HD // 2], x[..., HD // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def decode_step(x, k_cache, v_cache, mask, cos, sin, wq, wk, wv, wo, wg, wu, wd, n1, n2):
    """x [B, 1, D]; caches [B, H, S, HD]; mask [B, 1, 1, S] additive; cos/sin [1, 1, 1, HD]."""
    B = x.shape[0]
    h = _rms(x, n1)
    q = (h @ wq.t()).view(B, 1, H, HD).transpose(1, 2)
    k = (h @ wk.t()).view(B, 1, H, HD).transpose(1, 2)
    v = (h @ wv.t()).view(B, 1, H, HD).transpose(1, 2)
    q, k = _rot(q, cos, sin), _rot(k, cos, sin)
    scale = 1.0 / math.sqrt(HD)
    s_cache = (q @ k_cache.transpose(2, 3)) * scale + mask          # [B, H, 1, S]
    s_new = (q * k).sum(-1, keepdim=True) * scale                   # [B, H, 1, 1]
    p = torch.softmax(torch.cat([s_cache, s_new], dim=-1).float(), dim=-1).to(x.dtype)
    o = p[..., :-1] @ v_cache + p[..., -1:] * v                     # [B, H, 1, HD]
    x = x + o.transpose(1, 2).reshape(B, 1, D) @ wo.t()
    h = _rms(x, n2)
    return x + (torch.nn.functional.silu(h @ wg.t()) * (h @ wu.t())) @ wd.t()


def shapes(batch: int, cache: int) -> list[tuple[int, ...]]:
    return [(batch, 1, D), (batch, H, cache, HD), (batch, H, cache, HD), (batch, 1, 1, cache),
            (1, 1, 1, HD), (1, 1, 1, HD), (D, D), (D, D), (D, D), (D, D), (FF, D), (FF, D), (D, FF),
            (D,), (D,)]


def price(batch: int, cache: int, target_name: str) -> dict:
    from torch.fx.experimental.proxy_tensor import make_fx

    from neuron_inductor import pipeline
    from neuron_inductor.config import get_config
    from neuron_inductor.costmodel import estimate_program
    from neuron_inductor.graph.decompositions import decomposition_table
    from neuron_inductor.graph.passes import run_passes
    from neuron_inductor.target import get_target

    target = get_target(target_name)
    shp = shapes(batch, cache)
    args = [torch.empty(s, dtype=BF16, device="meta") for s in shp]
    gm = make_fx(lambda *a: (decode_step(*a),), decomposition_table=decomposition_table(),
                 tracing_mode="fake")(*args)
    lg = pipeline.partition_and_lower(run_passes(gm), get_config().replace(target=target_name, cache=False),
                                      f"decode_b{batch}")
    cost = estimate_program(list(lg.program.kernels), target)
    nbytes = sum(math.prod(s) * 2 for s in shp) + batch * D * 2
    roof = nbytes / target.hbm_bytes_per_s
    return {"batch": batch, "fallbacks": len(lg.fallbacks), "kernels": len(cost.kernels),
            "seconds": cost.seconds, "roofline": roof, "bytes": nbytes, "hbm": cost.hbm_bytes, "cost": cost}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="trn2")
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 8])
    ap.add_argument("--cache", type=int, default=2048)
    ap.add_argument("--table", action="store_true")
    args = ap.parse_args(argv)
    print(f"Llama-7B-shaped layer, one decode step, static KV cache {args.cache}, bf16, "
          f"{args.target} (1 NeuronCore), calibrated cost model")
    for b in args.batch:
        r = price(b, args.cache, args.target)
        print(f"  batch {b}: {r['seconds'] * 1e3:7.3f} ms modelled, HBM roofline {r['roofline'] * 1e3:7.3f} ms "
              f"({r['bytes'] / 1e6:.0f} MB) -> {100 * r['roofline'] / r['seconds']:5.1f}% of roofline; "
              f"HBM moved {r['hbm'] / r['bytes']:.2f}x the minimum, {r['kernels']} kernels, "
              f"{r['fallbacks']} fallbacks")
        if args.table:
            from neuron_inductor.costmodel import format_cost_table
            print(format_cost_table(r["cost"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
