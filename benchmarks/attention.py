"""Flash attention fwd / bwd at Llama-7B shape (32 heads x seq 2048 x head dim 128, bf16), priced by the
cost model against the matmul-FLOP roofline. Never simulated: the graphs are traced with fake tensors
and lowered by the real lowering; only the tile IR is priced.

Run: ``python benchmarks/attention.py [--target trn2] [--seq 2048] [--heads 32] [--dim 128]``.
"""
from __future__ import annotations

import argparse

import torch

aten = torch.ops.aten


def lowered_attention(batch: int, heads: int, seq: int, dim: int, causal: bool, cfg,
                      dtype: torch.dtype = torch.bfloat16):
    """(forward kernels, backward kernels) of torch's CPU flash op and its backward, lowered by our
    real pipeline from fake tensors (nothing is allocated or run)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from neuron_inductor.pipeline import partition_and_lower as lower_graph

    def fwd(q, k, v):
        return aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, causal)

    def bwd(go, q, k, v, o, lse):
        return aten._scaled_dot_product_flash_attention_for_cpu_backward.default(
            go, q, k, v, o, lse, 0.0, causal)

    with FakeTensorMode():
        q, k, v, go, o = (torch.empty(batch, heads, seq, dim, dtype=dtype) for _ in range(5))
        lse = torch.empty(batch, heads, seq, dtype=torch.float32)
        gf = make_fx(fwd)(q, k, v)
        gb = make_fx(bwd)(go, q, k, v, o, lse)
    return (lower_graph(gf, cfg, "attn_fwd").program.kernels,
            lower_graph(gb, cfg, "attn_bwd").program.kernels)


def roofline_flops(batch: int, heads: int, seq: int, dim: int, causal: bool) -> tuple[float, float]:
    """Useful matmul FLOPs (fwd: QK^T, PV; bwd: S recompute, dP, dV, dK, dQ) over the attended
    (query, key) pairs only: the lower triangle with its diagonal when causal."""
    pairs = seq * (seq + 1) / 2 if causal else seq * seq
    per = 2.0 * batch * heads * pairs * dim
    return 2 * per, 5 * per


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="trn2")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    args = ap.parse_args()

    from neuron_inductor import lowering  # noqa: F401
    from neuron_inductor.config import get_config
    from neuron_inductor.costmodel import estimate_program
    from neuron_inductor.target import get_target

    target = get_target(args.target)
    cfg = get_config().replace(target=args.target, cache=False)
    print(f"flash attention, batch {args.batch} x {args.heads} heads x seq {args.seq} x head dim {args.dim}, "
          f"bf16, {target.name} (1 NeuronCore)")
    for causal in (True, False):
        fk, bk = lowered_attention(args.batch, args.heads, args.seq, args.dim, causal, cfg)
        for name, ks, flops in zip(("fwd", "bwd"), (fk, bk),
                                   roofline_flops(args.batch, args.heads, args.seq, args.dim, causal)):
            pc = estimate_program(ks, target)
            roof = flops / target.peak_bf16_flops
            k = pc.kernels[0]
            util = " ".join(f"{e}={100 * u:.0f}%" for e, u in k.utilization.items())
            print(f"  {'causal' if causal else 'full  '} {name}: {pc.seconds * 1e3:7.3f} ms modelled, "
                  f"roofline {roof * 1e3:7.3f} ms -> {pc.seconds / roof:.2f}x  ({len(ks)} kernel; {util})")


if __name__ == "__main__":
    main()
