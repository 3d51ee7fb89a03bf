"""A GEMM inside the row loop of the fused group that reduces its output rows (lowering/matmul/rows.py):
projection + residual + RMSNorm forward, and the norm's backward (row sums and the weight gradient's
column sums) right after the next layer's input-gradient GEMM, against eager in fp32 and bf16, at
ragged token counts over several 128-row tiles, K over 128, and a single token."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from neuron_inductor import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models.blocks import RMSNorm  # noqa: E402


class ProjNorm(nn.Module):
    def __init__(self, k: int, d: int, n: int) -> None:
        super().__init__()
        self.o = nn.Linear(k, d, bias=False)
        self.n = RMSNorm(d)
        self.q = nn.Linear(d, n, bias=False)

    def forward(self, a, x):
        return self.q(self.n(x + self.o(a)))


def _run(model, a, x, compiled: bool):
    fn = torch.compile(model, backend="neuron", options={"cache": False}) if compiled else model
    a, x = (t.detach().clone().requires_grad_(True) for t in (a, x))
    out = fn(a, x)
    out.float().square().sum().backward()
    return [out.detach(), a.grad, x.grad] + [p.grad.clone() for p in model.parameters()]


def _check(k, d, n, tokens, dtype, tol):
    torch._dynamo.reset()
    stats.reset("compile", "fallback_ops")
    torch.manual_seed(0)
    model = ProjNorm(k, d, n).to(dtype)
    a, x = torch.randn(tokens, k, dtype=dtype), torch.randn(tokens, d, dtype=dtype)
    got = _run(model, a, x, compiled=True)
    kernels = stats.compiled()["kernels_generated"]
    assert not stats.fallback_ops()
    model.zero_grad()
    ref = _run(model, a, x, compiled=False)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, **tol)
    return kernels


FP32 = dict(rtol=1e-4, atol=1e-4)


def test_projection_norm_fp32_ragged_rows():
    # forward: o-projection + residual + RMSNorm in one kernel, then q; backward: q's dW beside
    # its dX with the norm's backward (row and column sums) in the dX kernel's row loop, then the
    # o-projection's dW and dA. 8 kernels before.
    assert _check(200, 64, 48, 300, torch.float32, FP32) == 4


@pytest.mark.parametrize("k,d,n,tokens", [(16, 96, 32, 1), (130, 512, 20, 129)], ids=["one-token", "full-bank"])
def test_projection_norm_fp32_shapes(k, d, n, tokens):
    _check(k, d, n, tokens, torch.float32, FP32)


def test_projection_norm_bf16():
    # bf16 eager rounds every intermediate; both are held against the fp32 model, and ours must be
    # no further from it than eager is (weight gradients of order 100 differ by ~0.6 in both)
    torch._dynamo.reset()
    stats.reset("compile", "fallback_ops")
    torch.manual_seed(0)
    model = ProjNorm(200, 64, 48).to(torch.bfloat16)
    a, x = torch.randn(300, 200, dtype=torch.bfloat16), torch.randn(300, 64, dtype=torch.bfloat16)
    got = _run(model, a, x, compiled=True)
    assert stats.compiled()["kernels_generated"] == 4 and not stats.fallback_ops()
    model.zero_grad()
    ref = _run(model, a, x, compiled=False)
    m32 = ProjNorm(200, 64, 48)
    m32.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    exact = _run(m32, a.float(), x.float(), compiled=False)
    for g, r, e in zip(got, ref, exact):
        ours, eager = (g.float() - e).abs().max(), (r.float() - e).abs().max()
        assert ours <= 1.5 * eager + 1e-2, (ours, eager)
