"""Horizontal fusion (graph/horizontal.py): independent groups reading one tensor launch as one kernel.
A linear layer's backward (dW = dY^T X and dX = dY W) is one launch, exact against eager; groups
where one reads the other's output stay apart; the plain-torch transformer block's training step
launches 16 kernels (26 before sibling GEMMs, epilogue absorption, GEMMs in row loops and horizontal
fusion)."""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn as nn
from torch.fx.experimental.proxy_tensor import make_fx

from neuron_inductor import stats
from neuron_inductor.graph.fusion import partition
from neuron_inductor.graph.passes import run_passes

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models.blocks import TransformerBlock  # noqa: E402


def _kinds(fn, *shapes):
    gm = make_fx(fn, tracing_mode="fake")(*[torch.randn(s) for s in shapes])
    return [g.kind for g in partition(run_passes(gm))]


def test_linear_backward_gemms_are_one_group():
    # dY [300, 48], X [300, 70], W [48, 70]: dW = dY^T X and dX = dY W share dY, neither reads the other
    kinds = _kinds(lambda dy, x, w: (dy.t() @ x, dy @ w), (300, 48), (300, 70), (48, 70))
    assert kinds == ["multi"]


def test_dependent_gemms_stay_apart():
    # the second GEMM reads the first one's result: no horizontal merge
    kinds = _kinds(lambda a, w1, w2: (a @ w1, (a @ w1) @ w2), (130, 40), (40, 600), (600, 20))
    assert "multi" not in kinds


def test_linear_layer_step_exact_and_one_backward_launch():
    stats.reset("compile", "fallback_ops")
    torch.manual_seed(0)
    lin = nn.Linear(70, 48)
    x = torch.randn(3, 100, 70, requires_grad=True)   # 300 rows: ragged, three row tiles
    out = torch.compile(lin, backend="neuron", options={"cache": False})(x)
    out.square().sum().backward()
    got = [x.grad.clone(), lin.weight.grad.clone(), lin.bias.grad.clone()]
    assert not stats.fallback_ops()
    # forward: the GEMM (+ bias); backward: the bias sum, and dW and dX as one kernel
    assert stats.compiled()["kernels_generated"] <= 3
    x.grad = None
    lin.zero_grad()
    lin(x).square().sum().backward()
    for g, r in zip(got, [x.grad, lin.weight.grad, lin.bias.grad]):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)


def test_transformer_block_step_launches():
    stats.reset("compile", "fallback_ops")
    torch.manual_seed(0)
    model = TransformerBlock()
    x = torch.randn(2, 128, 64, requires_grad=True)
    out = torch.compile(model, backend="neuron", options={"cache": False})(x)
    out.sum().backward()
    got = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    assert not stats.fallback_ops()
    assert stats.compiled()["kernels_generated"] <= 16
    x.grad = None
    model.zero_grad()
    model(x).sum().backward()
    for g, r in zip(got, [x.grad] + [p.grad for p in model.parameters()]):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)


def test_absorbed_parts_are_returned_in_graph_order(monkeypatch):
    """Lowering evaluates a group's (and each absorbed part's) nodes in list order, so partition
    must return them in graph order whatever order merging left them in (a row-reduction part of
    inkling2's backward once came out of order: a KeyError, the whole graph eager)."""
    from neuron_inductor.graph import fusion
    real = fusion.absorb_into_epilogues

    def shuffled(p):
        real(p)
        for g in p.groups:
            for part in g.parts:
                part.nodes.reverse()
    monkeypatch.setattr(fusion, "absorb_into_epilogues", shuffled)

    def proj_norm(a, w, r, g):   # o-projection + residual + RMSNorm: the norm's row loop holds the GEMM
        h = a @ w + r
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * g
    gm = run_passes(make_fx(proj_norm, tracing_mode="fake")(
        torch.randn(300, 64), torch.randn(64, 96), torch.randn(300, 96), torch.randn(96)))
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    groups = partition(gm)
    assert any(g.parts for g in groups)
    for g in groups:
        for h in (g, *g.parts):
            assert [order[n] for n in h.nodes] == sorted(order[n] for n in h.nodes)
