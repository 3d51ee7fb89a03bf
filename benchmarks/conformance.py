"""NKI conformance of the kernels we generate for a fixed set of programs, on trn1, trn2 and trn3.

For each program and target: compile (forward, and backward where the program trains) with the
IR verifier's spec checks deferred to the static check of the emitted source, so every kernel is
generated and linted; print the kernels generated, the conformance findings by rule (must be 0:
a non-conforming graph runs eagerly instead), the graphs that fell back, and the modelled time of
the generated kernels (cost model). ``--json OUT`` saves the figures; ``--baseline OLD`` prints the
change in modelled time against a saved run (e.g. before and after conforming rewrites).

    python benchmarks/conformance.py [--targets trn1 trn2 trn3] [--json out.json] [--baseline old.json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from _models import TransformerBlock, mlp  # noqa: E402
from neuron_inductor import pipeline  # noqa: E402
from neuron_inductor import config, stats  # noqa: E402
from neuron_inductor.cli.lint import lint_dir  # noqa: E402
from neuron_inductor.target import TARGETS  # noqa: E402


def _train(model, *inputs):
    def run():
        out = model(*inputs)
        loss = out.float().pow(2).mean() if out.dim() else out
        loss.backward()
        return out
    return run


def p_mlp():
    torch.manual_seed(0)
    m = mlp()
    c = torch.compile(m, backend="neuron")
    return _train(c, torch.randn(300, 64))


def _attn(dtype, train):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 200, 32, dtype=dtype, requires_grad=train) for _ in range(3))
    f = torch.compile(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), backend="neuron")
    return _train(f, q, k, v) if train else (lambda: f(q, k, v))


def p_attention_fp32():
    return _attn(torch.float32, True)


def p_attention_bf16():
    return _attn(torch.bfloat16, False)


class _Norms(nn.Module):
    def __init__(self, d=96):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.w = nn.Parameter(torch.ones(d))

    def forward(self, x):
        r = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w
        return self.ln(r)


def p_norms():
    torch.manual_seed(0)
    return _train(torch.compile(_Norms(), backend="neuron"), torch.randn(300, 96, requires_grad=True))


def p_rotary():
    def rope(x, pos):
        inv = 1.0 / (10000 ** (torch.arange(0, 64, 2, dtype=torch.float32) / 64))
        ang = pos[:, None].float() * inv[None, :]
        cos, sin = ang.cos(), ang.sin()
        x1, x2 = x[..., :32], x[..., 32:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)
    x = torch.randn(256, 64)
    pos = torch.arange(8192 - 256, 8192)
    f = torch.compile(rope, backend="neuron")
    return lambda: f(x, pos)


class _EmbedLoss(nn.Module):
    def __init__(self, vocab=1000, d=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids, labels):
        return F.cross_entropy(self.head(self.emb(ids)), labels)


def p_embedding_loss():
    torch.manual_seed(0)
    m = torch.compile(_EmbedLoss(), backend="neuron")
    ids, labels = torch.randint(0, 1000, (200,)), torch.randint(0, 1000, (200,))
    return _train(m, ids, labels)


class _MoE(nn.Module):
    def __init__(self, d=64, experts=4, hidden=96):
        super().__init__()
        self.router = nn.Linear(d, experts)
        self.w1 = nn.Parameter(torch.randn(experts, d, hidden) * 0.05)
        self.w2 = nn.Parameter(torch.randn(experts, hidden, d) * 0.05)

    def forward(self, x):
        p = self.router(x).softmax(-1)
        top, idx = p.topk(2, dim=-1)
        gate = torch.zeros_like(p).scatter(-1, idx, top)
        h = torch.einsum("td,edh->eth", x, self.w1).relu()
        y = torch.einsum("eth,ehd->etd", h, self.w2)
        return torch.einsum("te,etd->td", gate, y)


def p_moe():
    torch.manual_seed(0)
    return _train(torch.compile(_MoE(), backend="neuron"), torch.randn(130, 64))


def p_ragged():
    torch.manual_seed(0)
    w = torch.randn(77, 45, requires_grad=True)

    def f(x):
        h = (x - x.mean(-1, keepdim=True)) @ w
        return torch.where(h > 0, h, 0.1 * h).sum(0)
    x = torch.randn(131, 77, requires_grad=True)
    return _train(torch.compile(f, backend="neuron"), x)


def p_block():
    torch.manual_seed(0)
    return _train(torch.compile(TransformerBlock(), backend="neuron"), torch.randn(2, 64, 64))


PROGRAMS = {"mlp": p_mlp, "attention_fp32": p_attention_fp32, "attention_bf16": p_attention_bf16,
            "rmsnorm_layernorm": p_norms, "rotary_pos8192": p_rotary, "embedding_xent": p_embedding_loss,
            "moe_block": p_moe, "ragged": p_ragged, "transformer_block": p_block}


def measure(name: str, target: str, keep: bool = False) -> dict:
    """Compile program ``name`` for ``target`` into a fresh dump dir and lint every kernel in it;
    the dir is removed afterwards unless ``keep`` (its path is then in ``"dump"``)."""
    costs: list[float] = []
    real_cost = pipeline._model_cost

    def capture(kernels, cfg):
        out = real_cost(kernels, cfg)
        if isinstance(out, dict) and "total" in out:
            costs.append(out["total"]["seconds"])
        return out

    d = tempfile.mkdtemp(prefix=f"ni_conf_{name}_{target}_")
    torch._dynamo.reset()
    stats.reset("compile", "fallback_ops")
    pipeline._model_cost = capture
    error = None
    try:
        with config.patch(target=target, debug_dir=d, verify_ir=False, fallback="warn", cache=False):
            PROGRAMS[name]()()
    except Exception as e:  # noqa: BLE001 - a benchmark reports, it does not stop
        error = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    finally:
        pipeline._model_cost = real_cost
    lint = lint_dir(d)
    if not keep:
        shutil.rmtree(d, ignore_errors=True)
    return {"kernels": lint["kernels"], "findings": {r: len(v) for r, v in lint["findings"].items()},
            "examples": {r: v[0] for r, v in lint["findings"].items()},
            "graph_fallbacks": stats.compiled()["graph_fallbacks"],
            "modelled_seconds": sum(costs), "error": error, "dump": d if keep else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    ap.add_argument("--programs", nargs="+", default=list(PROGRAMS))
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--baseline", help="a --json file of an earlier run: print the modelled-time change")
    ap.add_argument("--verbose", action="store_true", help="print one example finding per rule")
    ap.add_argument("--keep-dumps", action="store_true", help="keep each program's generated kernels")
    args = ap.parse_args(argv)
    base = json.load(open(args.baseline)) if args.baseline else {}
    results: dict = {}
    by_rule: Counter = Counter()
    print(f"{'program':<20} {'target':<6} {'kernels':>7} {'findings':>8} {'eager graphs':>12} "
          f"{'modelled':>11} {'vs baseline':>11}  rules")
    for name in args.programs:
        for t in args.targets:
            r = measure(name, t, keep=args.keep_dumps)
            results[f"{name}/{t}"] = r
            by_rule.update(r["findings"])
            old = base.get(f"{name}/{t}", {}).get("modelled_seconds")
            delta = f"{100 * (r['modelled_seconds'] / old - 1):+.1f}%" if old else "-"
            rules = ", ".join(f"{k}={v}" for k, v in sorted(r["findings"].items()))
            print(f"{name:<20} {t:<6} {r['kernels']:>7} {sum(r['findings'].values()):>8} "
                  f"{r['graph_fallbacks']:>12} {r['modelled_seconds'] * 1e6:>9.1f}us {delta:>11}  {rules}"
                  + (f"  ERROR {r['error']}" if r["error"] else ""))
            if args.verbose:
                for k, v in r["examples"].items():
                    print(f"      [{k}] {v[:200]}")
    total = sum(by_rule.values())
    print(f"\nfindings by rule (all programs and targets): {total}")
    for rule, n in by_rule.most_common():
        print(f"  {rule:<32} {n}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if total == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
