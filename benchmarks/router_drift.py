"""Which tokens a bf16 MoE step routes unlike its fp32 reference, eager vs compiled.

    python benchmarks/router_drift.py --arch exaone_moe --side right [--score sigmoid]

For the matrix's tiny model (benchmarks/architectures.py) and its padded batch, one training-mode
forward in fp32 (reference: the bf16-rounded weights in fp32), eager bf16 and compiled bf16, with
``output_router_logits=True``. Per router it prints each bf16 run's router-logit error against the
reference, the tokens whose top-k experts differ from the reference's, and those tokens' reference
gap between the k-th and (k+1)-th score; then the logits error with and without the tokens the
compiled run routed otherwise. A bf16 logits failure that is a routing near-tie shows router
errors like eager's, a few flipped tokens with gaps inside that error, and compiled logits as close
to fp32 as eager's once those tokens are left out; a precision bug shows in the router error or in
the remaining tokens.
"""
from __future__ import annotations

import argparse
import copy
import logging
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import arch_checks as A  # noqa: E402


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.detach().float().reshape(-1, t.shape[-1])


def _choice(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Each token's top-k experts, as a sorted index set (order within the k does not route)."""
    return scores.topk(k, -1).indices.sort(-1).values


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", required=True, choices=list(A.ARCHS))
    ap.add_argument("--side", default="right", choices=A.SIDES)
    ap.add_argument("--score", default="sigmoid", choices=("sigmoid", "softmax"),
                    help="the router's scoring of its logits (gaps are printed in that space)")
    ap.add_argument("--seq", type=int, default=A.SEQ)
    args = ap.parse_args(argv)
    logging.getLogger("neuron_inductor").setLevel(logging.ERROR)
    score = torch.sigmoid if args.score == "sigmoid" else (lambda t: t.softmax(-1))
    model = A.build(args.arch)
    batch = A.padded_batch(args.seq, args.side)
    work = A.to_bf16(copy.deepcopy(model)).train()
    exact = copy.deepcopy(work).float()
    kw = dict(batch, output_router_logits=True)
    ref, eager, comp = exact(**kw), work(**kw), A._compile(work)(**kw)
    if not ref.router_logits:
        print(f"{args.arch} returns no router logits")
        return 1
    k = model.config.num_experts_per_tok
    real = batch["attention_mask"].reshape(-1).bool()
    keep = torch.ones_like(real)
    for i, logits in enumerate(zip(ref.router_logits, eager.router_logits, comp.router_logits)):
        r, e, c = (_flat(t) for t in logits)
        rs, es, cs = score(r), score(e), score(c)
        gap = rs.sort(-1, descending=True).values
        gap = gap[:, k - 1] - gap[:, k]
        print(f"router {i}: logits error vs fp32 eager {A._rel(e, r):.3g}, compiled {A._rel(c, r):.3g}; "
              f"median {args.score} gap k/k+1 {gap.median():.3g}")
        for name, s in (("eager", es), ("compiled", cs)):
            flip = (_choice(s, k) != _choice(rs, k)).any(-1)
            if name == "compiled":
                keep &= ~flip
            noise = float((s - rs).abs().max())
            gaps = f", their fp32 gap max {gap[flip].max():.3g}" if flip.any() else ""
            print(f"  {name}: {int(flip.sum())} tokens routed unlike fp32 ({int((flip & real).sum())} "
                  f"real){gaps}; its {args.score} score error max {noise:.3g}")
    lr, le, lc = _flat(ref.logits), _flat(eager.logits), _flat(comp.logits)
    print(f"logits error vs fp32: eager {A._rel(le, lr):.4g}, compiled {A._rel(lc, lr):.4g}; without the "
          f"{int((~keep).sum())} tokens compiled routed otherwise: eager {A._rel(le[keep], lr[keep]):.4g}, "
          f"compiled {A._rel(lc[keep], lr[keep]):.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
