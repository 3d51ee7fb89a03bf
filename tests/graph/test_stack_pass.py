"""The backward of a fused-qkv ``unbind`` (masked selects summed) becomes one ``cat``: exact, and
priced at a fraction of the VectorE pass it replaces."""
from __future__ import annotations

import pytest
import torch
from functorch.compile import aot_function, make_boxed_func
from torch.fx.experimental.proxy_tensor import make_fx

from neuron_inductor import pipeline
from neuron_inductor.config import get_config
from neuron_inductor.costmodel import estimate_program
from neuron_inductor.graph import passes
from neuron_inductor.graph.decompositions import decomposition_table
from neuron_inductor.graph.passes import run_passes
from neuron_inductor.graph.stack_pass import masked_sum_to_cat
from neuron_inductor.target import get_target

aten = torch.ops.aten


def unbind_fn(qkv: torch.Tensor) -> torch.Tensor:
    """A fused-qkv split as Dynamo traces the decoder block's ``q, k, v = tensor``: three selects."""
    q, k, v = qkv[0], qkv[1], qkv[2]
    return q * k * v


def grad_via_aot(x: torch.Tensor, with_passes: bool):
    """(x.grad, backward graph) through AOTAutograd with our decompositions, the backward graph run
    with or without our passes."""
    seen = {}

    def bw(gm, example_inputs):
        if with_passes:
            run_passes(gm)
        seen["bw"] = gm
        return make_boxed_func(gm)

    f = aot_function(unbind_fn, fw_compiler=lambda gm, ex: make_boxed_func(gm), bw_compiler=bw,
                     decompositions=decomposition_table())
    x = x.detach().clone().requires_grad_()
    f(x).sum().backward()
    return x.grad, seen["bw"]


def targets(gm) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_unbind_backward_becomes_cat_and_is_exact():
    x = torch.randn(3, 2, 5, 7)
    x[1, 0, 0, 0] = -0.0
    x[0, 1, 2, 3] = float("nan")
    x[2, 1, 1, 1] = float("inf")
    before, gm0 = grad_via_aot(x, with_passes=False)
    assert aten.where.self in targets(gm0)  # the pattern the pass exists for
    after, gm1 = grad_via_aot(x, with_passes=True)
    assert aten.cat.default in targets(gm1) and aten.where.self not in targets(gm1)
    xe = x.clone().requires_grad_()
    unbind_fn(xe).sum().backward()
    for got in (before, after):
        assert torch.equal(got.isnan(), xe.grad.isnan())
        assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(xe.grad))


def test_partial_cover_is_left_alone():
    def two_of_three(a, b):
        full = aten.full.default([3, 4], 0.0)
        iota = aten.view.default(aten.arange.start_step(0, 3), [3, 1])
        wa = aten.where.self(aten.eq.Scalar(iota, 0), aten.expand.default(aten.unsqueeze.default(a, 0), [3, 4]), full)
        wb = aten.where.self(aten.eq.Scalar(iota, 2), aten.expand.default(aten.unsqueeze.default(b, 0), [3, 4]), full)
        return (aten.add.Tensor(wa, wb),)
    gm = make_fx(two_of_three, tracing_mode="fake")(torch.randn(4), torch.randn(4))
    run_passes(gm)
    assert aten.cat.default not in targets(gm) and aten.where.self in targets(gm)


@pytest.mark.parametrize("target", ["trn2"])
def test_llama_qkv_gradient_gather_modelled(target):
    # the decoder layer's fused-qkv gradient gather, [3, 1, 32, 2048, 128] bf16: three masked
    # selects and two adds on VectorE were 5.08 ms (VectorE bound); as a cat it is copies only
    x = torch.empty(3, 1, 32, 2048, 128, dtype=torch.bfloat16, device="meta")
    _, gm = grad_via_aot(x, with_passes=True)
    lg = pipeline.partition_and_lower(gm, get_config().replace(target=target, cache=False), "qkv")
    gather = [k for k in lg.program.kernels if "cat" in k.name or "where" in k.name]
    assert gather and all("where" not in k.name for k in gather)
    pc = estimate_program(gather, get_target(target))
    assert pc.seconds < 2.5e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_qkv_split_through_the_backend_matches_eager(dtype, monkeypatch):
    # Dynamo turns ``q, k, v = tensor`` into selects; their backward is the rewritten sum. Rows span
    # two 128-row tiles plus a ragged one; the gradient contains exact zeros and negative zeros
    torch.manual_seed(0)
    lin = torch.nn.Linear(24, 3 * 24, bias=False).to(dtype)

    def f(x):
        q, k, v = lin(x).view(2, 150, 3, 24).permute(2, 0, 1, 3)
        return torch.relu(q) * k - v

    x = torch.randn(2, 150, 24, dtype=dtype)
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    f(xe).sum().backward()
    we = lin.weight.grad.clone()
    lin.weight.grad = None
    rewrites = []

    def spy(gm, cfg):
        before = targets(gm).count(aten.cat.default)
        masked_sum_to_cat(gm, cfg)
        rewrites.append(targets(gm).count(aten.cat.default) - before)
    monkeypatch.setattr(passes, "PASSES", [spy if p is masked_sum_to_cat else p for p in passes.PASSES])
    torch._dynamo.reset()
    torch.compile(f, backend="neuron")(xc).sum().backward()
    assert rewrites == [0, 1]  # the backward's three masked selects became one cat
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(xc.grad, xe.grad, **tol)
    torch.testing.assert_close(lin.weight.grad, we, **tol)
