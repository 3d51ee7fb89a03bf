"""The fused-qkv backward's stack of dQ, dK, dV made contiguous in the projection's layout
(``clone(permute(cat))``) is one ``cat`` written in that layout: same numbers, one copy kernel."""
from __future__ import annotations

import sys
from pathlib import Path

import torch
from functorch.compile import aot_function, make_boxed_func

from neuron_inductor.graph.decompositions import decomposition_table
from neuron_inductor.graph.passes import run_passes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lowering"))
from _ops import check_cases, randn  # noqa: E402

aten = torch.ops.aten


def qkv_fn(x, w):
    b, s, _ = x.shape
    qkv = (x @ w.t()).view(b, s, 3, 2, 8).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    return q * k + v


def _backward_targets() -> list:
    seen = {}

    def bw(gm, example_inputs):
        run_passes(gm)
        seen["bw"] = gm
        return make_boxed_func(gm)
    f = aot_function(qkv_fn, fw_compiler=lambda gm, ex: make_boxed_func(gm), bw_compiler=bw,
                     decompositions=decomposition_table())
    x, w = torch.randn(2, 5, 16, requires_grad=True), torch.randn(48, 16, requires_grad=True)
    f(x, w).sum().backward()
    return [n.target for n in seen["bw"].graph.nodes if n.op == "call_function"]


def test_stack_then_clone_is_one_cat():
    ts = _backward_targets()
    assert ts.count(aten.cat.default) == 1 and aten.clone.default not in ts


def test_qkv_backward_matches_eager():
    cases = [(randn((2, 130, 16), seed=1), randn((48, 16), seed=2)),
             (randn((1, 7, 16), torch.bfloat16, seed=3), randn((48, 16), torch.bfloat16, seed=4))]
    check_cases(qkv_fn, cases, grad=True, rtol=1e-4, atol=1e-4)  # fp32 dW sums 260 products
