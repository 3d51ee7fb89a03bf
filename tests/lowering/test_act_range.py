"""log / sqrt / rsqrt give eager's answers on every float input: zero, negatives, ±inf, NaN and
values outside ScalarE's documented activation ranges (the simulator refused the kernel at run time
before: ``[activation-range] activation op=sqrt ... e.g. 0.0``)."""
from __future__ import annotations

import math

import pytest
import torch

from neuron_inductor import stats
from tests._compare import check, run_compiled

EDGES = [0.0, -0.0, 1.0, -1.0, 4.0, 1e-45, 1e-38, 1e-30, 5e-20, 1e-19, 1e19, 2e19, 1e30, 3e38,
         math.inf, -math.inf, math.nan, 0.5, 2.0, 1e-3, 123.456]


def _edges(n: int = 300) -> torch.Tensor:
    x = torch.tensor(EDGES)
    return torch.cat([x, torch.rand(n) * 10]).reshape(-1, 3)


@pytest.mark.parametrize("fn", [torch.log, torch.sqrt, torch.rsqrt, lambda t: t.pow(0.5), lambda t: t.pow(-0.5),
                                torch.log1p, lambda t: torch.log(t) * torch.sqrt(t)],
                         ids=["log", "sqrt", "rsqrt", "pow_half", "pow_neg_half", "log1p", "log_sqrt"])
def test_edge_values_match_eager(fn):
    x = _edges()
    stats.reset()
    got = check(fn, x, rtol=2e-6, atol=1e-6)
    assert stats.compiled()["graph_fallbacks"] == 0
    want = fn(x)
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(torch.isinf(got) & (got > 0), torch.isinf(want) & (want > 0))
    assert torch.equal(torch.isinf(got) & (got < 0), torch.isinf(want) & (want < 0))


def test_norm_of_a_zero_vector_and_its_gradient():
    """``sqrt(sum(x^2))`` of zeros (a zero gradient's norm, a padded row): 0 forward, and the
    gradient eager gives (NaN from 0/0)."""
    x = torch.zeros(5, 300)
    x[0] = torch.randn(300)
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    fn = lambda t: torch.sqrt((t * t).sum(-1))  # noqa: E731
    seed = torch.randn(5)
    fn(xe).backward(seed)
    got = run_compiled(fn, xc)
    got.backward(seed)
    torch.testing.assert_close(got, fn(x), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(xc.grad, xe.grad, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_log_of_underflowed_probabilities_in_bf16():
    p = torch.softmax(torch.randn(4, 300) * 30, -1).bfloat16()
    check(torch.log, p)


@pytest.mark.parametrize("scale", [3.0, 1e4, 1e5, 1.5e6], ids=lambda s: f"{s:g}")
@pytest.mark.parametrize("fn", [torch.sin, torch.cos], ids=["sin", "cos"])
def test_sin_cos_of_large_angles_as_accurate_as_float32(fn, scale):
    """Rotary angles reach position * 1.0: the argument reduction was exact only below 2^14, so
    sin(4e5) was off by 4e-3. Now within a few float32 ulps of [-1, 1] up to 1.6e6."""
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(1000, generator=g) - 0.5) * 2 * scale
    got = run_compiled(fn, x)
    want = fn(x.double()).float()
    assert float((got - want).abs().max()) < 1e-6
