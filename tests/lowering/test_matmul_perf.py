"""Modelled TensorE utilization of the GEMM the real lowering produces, at shapes far too big to
simulate: the graph is traced on meta tensors, lowered, and priced by the validated cost model (which
is deterministic, so these are not timing tests). Floors guard what the blocked GEMM reaches today;
the issue's targets (85% tutorial, 70% Llama linears) are strict xfails until they are met."""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from neuron_inductor import lowering
from neuron_inductor.config import get_config
from neuron_inductor.costmodel import estimate_program
from neuron_inductor.graph.passes import run_passes
from neuron_inductor.target import get_target

BF16 = torch.bfloat16


def modelled_mfu(fn, shapes, target: str) -> float:
    args = [torch.empty(s, dtype=BF16, device="meta") for s in shapes]
    gm = make_fx(lambda *a: (fn(*a),), tracing_mode="fake")(*args)
    lg = lowering.lower_graph(run_passes(gm), get_config().replace(target=target, cache=False), "perf")
    (k,) = [k for k in lg.program.kernels if "mm" in k.name]
    return estimate_program([k], get_target(target)).kernels[0].mfu


# Llama-7B layer, 2048 tokens: forward x @ W^T (both operands transposed on TensorE) and the
# backward dX = dY @ W, dW = dY^T @ X (direct loads)
LLAMA_FWD = [((2048, 4096), (4096, 4096)), ((2048, 4096), (11008, 4096)), ((2048, 11008), (4096, 11008))]
LLAMA_BWD = [(lambda g, w: g @ w, (2048, 11008), (11008, 4096)),
             (lambda g, x: g.t() @ x, (2048, 4096), (2048, 11008))]


def test_tutorial_shape_trn1_floor():
    mfu = modelled_mfu(lambda a, b: a @ b, [(4096, 8192), (8192, 8192)], "trn1")
    assert mfu >= 0.80, mfu   # was 0.53 with one 128x512 tile per DMA; strided lhs^T loads: ~0.01


@pytest.mark.parametrize("fn,sa,sb", LLAMA_BWD, ids=["dX", "dW"])
def test_llama_backward_linears_floor(fn, sa, sb):
    assert modelled_mfu(fn, [sa, sb], "trn2") >= 0.55


@pytest.mark.parametrize("sx,sw", LLAMA_FWD, ids=["qkvo", "gate_up", "down"])
def test_llama_forward_linears_floor(sx, sw):
    # element-strided W^T loads made these ~0.1-0.5%; TensorE transposes bring them to 28-39%
    assert modelled_mfu(lambda x, w: x @ w.t(), [sx, sw], "trn2") >= 0.25


@pytest.mark.xfail(strict=True, reason="issue 5 target not reached: the model puts the blocked GEMM at 82%")
def test_tutorial_shape_trn1_target():
    assert modelled_mfu(lambda a, b: a @ b, [(4096, 8192), (8192, 8192)], "trn1") >= 0.85


@pytest.mark.xfail(strict=True, reason="issue 5 target not reached: W^T transposes are redone per M block")
def test_llama_forward_linears_target():
    assert min(modelled_mfu(lambda x, w: x @ w.t(), [sx, sw], "trn2") for sx, sw in LLAMA_FWD) >= 0.70
