"""Sibling GEMMs in one kernel (lowering/matmul/multi.py, graph/epilogue_absorb.py, graph/horizontal.py):
a SwiGLU MLP's forward and backward against eager, fp32 and bf16, at token counts that are ragged
and span several 128-row tiles, with K over 128 (ragged K steps) and W^T operands transposed on
TensorE; the kernel counts are asserted (deterministic), so each fusion is seen to happen."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from neuron_inductor import stats


class SwiGLU(nn.Module):
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return x + self.down(F.silu(self.gate(x)) * self.up(x))


def _step(model, x, compiled: bool):
    fn = torch.compile(model, backend="neuron", options={"cache": False}) if compiled else model
    x = x.detach().clone().requires_grad_(True)
    out = fn(x)
    out.float().pow(2).sum().backward()
    grads = [x.grad] + [p.grad for p in model.parameters()]
    return out.detach(), [g.detach().clone() for g in grads]


def _compare(d: int, hidden: int, tokens: int, dtype, tol):
    torch._dynamo.reset()
    stats.reset("compile", "fallback_ops")
    torch.manual_seed(0)
    model = SwiGLU(d, hidden).to(dtype)
    x = torch.randn(tokens, d, dtype=dtype)
    out, grads = _step(model, x, compiled=True)
    kernels = stats.compiled()["kernels_generated"]
    assert not stats.fallback_ops()
    model.zero_grad()
    ref, ref_grads = _step(model, x, compiled=False)
    torch.testing.assert_close(out, ref, **tol)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, **tol)
    return kernels


FP32 = dict(rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("d,hidden,tokens", [(64, 176, 300), (200, 96, 129), (8, 512, 1)],
                         ids=["ragged-rows", "k-over-128", "one-row-full-bank"])
def test_swiglu_mlp_fp32(d, hidden, tokens):
    kernels = _compare(d, hidden, tokens, torch.float32, FP32)
    # forward: gate+up (one kernel, SwiGLU in its epilogue), down (+ residual); backward: the down
    # projection's dW and d(h) (SwiGLU backward in its epilogue) in one kernel, then the gate/up
    # weight gradients beside their input gradients (one kernel, the two summed in PSUM order)
    assert kernels == 4


def test_swiglu_mlp_bf16():
    # bf16 eager rounds every intermediate, the fused kernels keep fp32 between GEMM and epilogue:
    # both are held against the fp32 model, and ours must be no further from it than eager is
    torch._dynamo.reset()
    stats.reset("compile", "fallback_ops")
    torch.manual_seed(0)
    model = SwiGLU(64, 176).to(torch.bfloat16)
    x = torch.randn(300, 64, dtype=torch.bfloat16)
    out, grads = _step(model, x, compiled=True)
    assert stats.compiled()["kernels_generated"] == 4 and not stats.fallback_ops()
    model.zero_grad()
    ref, ref_grads = _step(model, x, compiled=False)
    m32 = SwiGLU(64, 176)
    m32.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    out32, grads32 = _step(m32, x.float(), compiled=False)
    for a, b, c in zip([out] + grads, [ref] + ref_grads, [out32] + grads32):
        ours, eager = (a.float() - c).abs().max(), (b.float() - c).abs().max()
        assert ours <= 1.5 * eager + 1e-2, (ours, eager)


def test_wide_outputs_keep_separate_gemms():
    # 600 columns exceed one PSUM bank: gate and up stay two GEMMs (still exact), the SwiGLU
    # backward stays a pass of its own
    assert _compare(32, 600, 40, torch.float32, FP32) > 4


def test_refused_sibling_kernel_falls_back_to_separate_kernels(monkeypatch):
    # a merged kernel that cannot be built is lowered as the groups it was merged from (the multi
    # kernel holding it too): more launches, the same numbers, no eager fallback
    from neuron_inductor.lowering import registry
    from neuron_inductor.lowering.layout import LoweringError

    def refuse(*a, **k):
        raise LoweringError("refused for the test")
    monkeypatch.setitem(registry.LOWERINGS, "matmul_multi", registry.Lowering("group", refuse))
    assert _compare(64, 176, 300, torch.float32, FP32) > 4
