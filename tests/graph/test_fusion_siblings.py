"""Fused groups reading one tensor merge even when the first of them cannot take the others: the
transformer block's first RMSNorm backward (fp32) has its weight-gradient column sum and its
row reduction in one kernel, not two, and the block's training step compiles to 26 kernels."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from neuron_inductor import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models.blocks import TransformerBlock  # noqa: E402


def test_block_norm_backward_is_one_kernel():
    torch._dynamo.reset()
    stats.reset("compile", "fallback_ops")
    torch.manual_seed(0)
    model = TransformerBlock()
    x = torch.randn(2, 128, 64, requires_grad=True)
    out = torch.compile(model, backend="neuron", options={"cache": False})(x)
    out.sum().backward()
    ref = x.grad.clone()
    x.grad = None
    model.zero_grad()
    model(x).sum().backward()
    torch.testing.assert_close(ref, x.grad, rtol=1e-4, atol=1e-4)
    assert not stats.fallback_ops()
    # 27 before (the column sum and the row reduction of the first norm's backward apart)
    assert stats.compiled()["kernels_generated"] <= 26
