"""Modelled TensorE utilization of the GEMM the real lowering produces, at shapes far too big to
simulate: the graph is traced on meta tensors, lowered, and priced by the validated cost model (which
is deterministic, so these are not timing tests). They assert the utilization targets: >= 85% on the
tutorial shape, >= 70% on every linear of a Llama-7B-shaped layer, forward and backward."""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from neuron_inductor import pipeline
from neuron_inductor.config import get_config
from neuron_inductor.costmodel import estimate_program
from neuron_inductor.graph.passes import run_passes
from neuron_inductor.target import get_target

BF16 = torch.bfloat16


def modelled_mfu(fn, shapes, target: str) -> float:
    args = [torch.empty(s, dtype=BF16, device="meta") for s in shapes]
    gm = make_fx(lambda *a: (fn(*a),), tracing_mode="fake")(*args)
    lg = pipeline.partition_and_lower(run_passes(gm), get_config().replace(target=target, cache=False), "perf")
    (k,) = [k for k in lg.program.kernels if "mm" in k.name]
    return estimate_program([k], get_target(target)).kernels[0].mfu


# Llama-7B layer, 2048 tokens: forward x @ W^T (both operands transposed on TensorE) and the
# backward dX = dY @ W, dW = dY^T @ X (direct loads)
LLAMA_FWD = [((2048, 4096), (4096, 4096)), ((2048, 4096), (11008, 4096)), ((2048, 11008), (4096, 11008))]
LLAMA_BWD = [(lambda g, w: g @ w, (2048, 11008), (11008, 4096)),
             (lambda g, x: g.t() @ x, (2048, 4096), (2048, 11008))]


def test_tutorial_shape_trn1_target():
    # >= 85% (the tutorial's best is 85.24%); the model gives ~91% because two column steps are in
    # flight (not 8 PSUM groups per step: ~82%) and a DMA moves several 128x512 tiles (one: ~53%)
    assert modelled_mfu(lambda a, b: a @ b, [(4096, 8192), (8192, 8192)], "trn1") >= 0.85


@pytest.mark.parametrize("fn,sa,sb", LLAMA_BWD, ids=["dX", "dW"])
def test_llama_backward_linears_target(fn, sa, sb):
    # >= 70%; ~89% / ~86% with the K x 512 rhs column resident and row tiles looped inside
    assert modelled_mfu(fn, [sa, sb], "trn2") >= 0.70


@pytest.mark.parametrize("sx,sw", LLAMA_FWD, ids=["qkvo", "gate_up", "down"])
def test_llama_forward_linears_target(sx, sw):
    # >= 70%. W^T is transposed once per (M block, column tile) with M blocks as tall as
    # SBUF allows (16 row tiles for K=4096, 4 for K=11008: ~87/89/77%); it was redone with every
    # block of 1-4 rows and every PSUM group held 8 banks (28-39%)
    assert modelled_mfu(lambda x, w: x @ w.t(), [sx, sw], "trn2") >= 0.70
