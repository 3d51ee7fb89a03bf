"""The random ops behind dropout (graph/decompositions_random.py): a counter-based stream keyed by a
draw from torch's generator. They match eager's *distribution*, not its bits, so the tests check
statistics (mean, variance, keep rates), determinism under a fixed seed, fresh values per call,
dropout's backward using the forward's mask, and that no op is left to a fallback."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from neuron_inductor import stats

aten = torch.ops.aten


def _compile(fn):
    torch._dynamo.reset()
    stats.reset("fallback_ops")
    return torch.compile(fn, backend="neuron", options={"fallback": "error"})


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_uniform_statistics_and_determinism(dtype):
    """rand_like, uniform_: mean 1/2, variance 1/12 within 6 standard errors, in [0, 1) (never 1.0
    after rounding to bf16), reproducible from the seed, different on the next call."""
    x = torch.zeros(300, 257, dtype=dtype)
    f = _compile(lambda x: (torch.rand_like(x), torch.empty_like(x).uniform_(-2.0, 3.0)))
    torch.manual_seed(1)
    u, v = f(x)
    torch.manual_seed(1)
    u2, v2 = f(x)
    u3, _ = f(x)
    assert not stats.fallback_ops(), dict(stats.fallback_ops())
    assert u.dtype == dtype and u.shape == x.shape
    assert torch.equal(u, u2) and torch.equal(v, v2)
    assert not torch.equal(u, u3)
    n = u.numel()
    uf = u.float()
    assert 0.0 <= uf.min() and uf.max() < 1.0
    assert abs(uf.mean().item() - 0.5) < 6 * math.sqrt(1 / 12 / n)
    assert abs(uf.var().item() - 1 / 12) < 6 * math.sqrt(1 / 180 / n)   # var of (u - 1/2)^2 is 1/180
    vf = v.float()
    assert -2.0 <= vf.min() and vf.max() < 3.0
    assert abs(vf.mean().item() - 0.5) < 6 * math.sqrt(25 / 12 / n)
    # neighbouring elements are not correlated (a counter hash, not a weak sequence)
    a, b = uf.view(-1)[:-1] - 0.5, uf.view(-1)[1:] - 0.5
    assert abs((a * b).mean().item()) < 6 * math.sqrt(1 / 144 / n)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_keep_rate_scale_and_backward_mask(p):
    """native_dropout: keep rate 1 - p, kept values scaled by 1 / (1 - p), and the gradient flows
    exactly through the forward's kept positions (the mask is saved, not redrawn)."""
    x = torch.randn(260, 300)
    w = torch.randn(300, 300) * 0.05

    def f(x, w):
        return F.dropout(x @ w, p, training=True)
    xc = x.clone().requires_grad_(True)
    torch.manual_seed(0)
    out = _compile(f)(xc, w)
    ref = x @ w
    kept = out != 0
    rate = kept.float().mean().item()
    n = out.numel()
    assert abs(rate - (1 - p)) < 6 * math.sqrt(p * (1 - p) / n)
    torch.testing.assert_close(out[kept], (ref / (1 - p))[kept], rtol=1e-4, atol=1e-5)
    g = torch.randn_like(out)
    out.backward(g)
    torch.testing.assert_close(xc.grad, ((g * kept) / (1 - p)) @ w.t(), rtol=1e-4, atol=1e-4)
    assert not stats.fallback_ops(), dict(stats.fallback_ops())


def test_dropout_in_a_module_bf16_and_eval_is_identity():
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.25)).to(torch.bfloat16)
    x = torch.randn(130, 64, dtype=torch.bfloat16)
    f = _compile(m)
    torch.manual_seed(3)
    a = f(x)
    torch.manual_seed(3)
    b = f(x)
    assert torch.equal(a, b)
    rate = (a != 0).float().mean().item()
    assert abs(rate - 0.75) < 6 * math.sqrt(0.25 * 0.75 / a.numel())
    m.eval()
    torch.testing.assert_close(_compile(m)(x), m(x))
    assert not stats.fallback_ops(), dict(stats.fallback_ops())


def test_bernoulli_rate_and_two_draws_differ():
    """bernoulli(p): rate p; two draws in one graph use two keys (not one merged draw)."""
    x = torch.full((400, 129), 0.3)
    a, b = _compile(lambda x: (torch.bernoulli(x * 0 + 0.3), torch.bernoulli(x * 0 + 0.3)))(x)
    assert not stats.fallback_ops(), dict(stats.fallback_ops())
    for t in (a, b):
        assert set(t.unique().tolist()) <= {0.0, 1.0}
        assert abs(t.mean().item() - 0.3) < 6 * math.sqrt(0.21 / t.numel())
    assert not torch.equal(a, b)


def test_stream_is_a_function_of_key_and_index():
    """The decomposition evaluated eagerly with the same key gives the compiled kernels' bits."""
    from neuron_inductor.graph.decompositions_random import uniform_bits
    from torch.fx.experimental.proxy_tensor import make_fx
    gm = make_fx(lambda x: uniform_bits(x.shape, torch.float32, x.device))(torch.zeros(3, 5))
    assert [n.target for n in gm.graph.nodes].count(aten.randint.low) == 1
    torch.manual_seed(7)
    eager = gm(torch.zeros(3, 5))
    torch.manual_seed(7)
    got = _compile(lambda x: torch.rand_like(x))(torch.zeros(3, 5))
    torch.testing.assert_close(got, eager, rtol=0, atol=0)


def test_exponential_mean_and_variance():
    """exponential_(lambd): mean 1/lambd, variance 1/lambd^2, all positive and finite."""
    x = torch.zeros(300, 131)
    e = _compile(lambda x: torch.empty_like(x).exponential_(2.0))(x)
    assert not stats.fallback_ops(), dict(stats.fallback_ops())
    n = e.numel()
    assert torch.isfinite(e).all() and (e >= 0).all()
    assert abs(e.mean().item() - 0.5) < 6 * math.sqrt(0.25 / n)
    assert abs(e.var().item() - 0.25) < 6 * math.sqrt(8 * 0.0625 / n)   # var of (e - m)^2: 8 / lambd^4
