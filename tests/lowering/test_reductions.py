"""Reductions and the fused normalisations against eager, forward and backward, fp32 and bf16.

sum/mean/amax/amin/var/prod over the last axis, the first axis, a middle axis, several axes and all
axes; softmax, log_softmax, layer_norm, rms_norm and cross_entropy as the fused kernels they become.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from _ops import check_cases, randn

from neuron_inductor import stats

# (dims, keepdim) over a 3-D input; None = all axes
DIMS = [((-1,), False), ((0,), False), ((1,), True), ((0, 2), False), (None, False)]

RED = {
    "sum": lambda x, d, k: x.sum() if d is None else x.sum(d, keepdim=k),
    "mean": lambda x, d, k: x.mean() if d is None else x.mean(d, keepdim=k),
    "amax": lambda x, d, k: x.amax() if d is None else x.amax(d, keepdim=k),
    "amin": lambda x, d, k: x.amin() if d is None else x.amin(d, keepdim=k),
    "var": lambda x, d, k: x.var() if d is None else x.var(d, keepdim=k),
    "prod": lambda x, d, k: x.prod() if d is None else x.prod(d[0], keepdim=k),
}


def _inputs(name, shape, dtype):
    x = randn(shape, dtype)
    if name == "prod":   # keep products near 1
        x = (1 + 0.05 * x.float()).to(dtype)
    return x


_RED_CASES = [(n, d, k) for n in sorted(RED) for d, k in DIMS
               if not (n == "prod" and d is not None and len(d) > 1)]   # prod takes one dim


@pytest.mark.filterwarnings("ignore:var.*degrees of freedom:UserWarning")
@pytest.mark.parametrize("name,dims,keep", _RED_CASES, ids=str)
def test_reduction(name, dims, keep):
    """prod: forward only here (its inputs may hold zeros); its backward is tested below."""
    cases = [(_inputs(name, (2, 129, 600), torch.float32),), (_inputs(name, (3, 300, 5), torch.bfloat16),),
             (_inputs(name, (1, 1, 1), torch.float32),)]
    # an fp32 sum of up to 154800 terms in a different order: error grows like sqrt(n) * eps * |x|
    check_cases(lambda x: RED[name](x, dims, keep), cases, grad=name != "prod",
                atol=1e-3 if name in ("sum", "var") and dims is None else None)


def test_prod_backward_is_lowered():
    """prod's backward takes exclusive cumprods both ways (flip, cumprod): all lowered."""
    x = 1 + 0.05 * randn((300, 130))
    check_cases(lambda x: x.prod(-1), [(x,)], grad=True)


@pytest.mark.parametrize("shape", [(1,), (300,), (4096,), (1009,)], ids=str)
def test_full_reduction_1d(shape):
    check_cases(lambda x: (x.sum(), x.amax(), x.mean()), [(randn(shape),)], grad=True, atol=1e-4)


def test_two_full_reductions_combined():
    """``(e*2).sum() + (p*p).sum()``: two full reductions feeding one scalar."""
    cases = [(randn(s), randn(t, seed=1)) for s, t in
             [((300, 130), (300, 130)), ((256,), (2, 129, 600)), ((1,), (64, 64)), ((4096,), (300,))]]
    check_cases(lambda e, p: (e * 2).sum() + (p * p).sum(), cases, grad=True, atol=1e-3)


def test_any_all_int_sum():
    """Integer reductions accumulate in fp32: lowered when the values are proven small (bools,
    clamped or narrow integers), so every partial sum is an exact fp32 integer."""
    x = randn((300, 130))
    i = torch.randint(-5, 5, (300, 130), dtype=torch.int32)
    check_cases(lambda x, i: ((x > 2).any(-1), (x > -3).all(0), i.clamp(-9, 9).sum(-1),
                              i.to(torch.int8).amax(0), (x > 0).sum(0)), [(x, i)])


def test_int32_sum_of_unbounded_values_is_a_declared_fallback():
    """int32.sum() promotes to int64 in torch; a sum of int32 values of unknown range would round in
    fp32 (2**30 + 2**30 + 3 ...), so it runs eagerly, declared, with torch's exact answer."""
    i = torch.tensor([[2**30, 2**30, 3, -7]] * 3, dtype=torch.int32)
    stats.reset("fallback_ops")
    check_cases(lambda i: (i.sum(-1), i.amax(0)), [(i,)], fallback="warn", _allow_fallback=True)
    assert any("sum" in k for k in stats.fallback_ops()), dict(stats.fallback_ops())


NORM_SHAPES = [(1, 1), (300, 130), (2, 129, 600)]


def _norm_cases(extra=lambda s, dt: ()):
    cases = [(randn(s),) + extra(s, torch.float32) for s in NORM_SHAPES]
    return cases + [(randn((300, 130), torch.bfloat16),) + extra((300, 130), torch.bfloat16)]


def test_softmax():
    check_cases(lambda x: (torch.softmax(x, -1), torch.softmax(x, 0)), _norm_cases(), grad=True)


def test_log_softmax():
    check_cases(lambda x: F.log_softmax(x, -1), _norm_cases(), grad=True)


def test_layer_norm():
    def w(s, dt):
        return randn(s[-1:], dt, seed=1), randn(s[-1:], dt, seed=2)
    check_cases(lambda x, g, b: F.layer_norm(x, x.shape[-1:], g, b, eps=1e-5), _norm_cases(w),
                grad=True)


def test_layer_norm_no_affine():
    check_cases(lambda x: F.layer_norm(x, x.shape[-1:]), _norm_cases(), grad=True)


def _rms_norm(x, w, eps=1e-6):
    """RMSNorm as in Llama: normalise in fp32, cast back, scale."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def test_rms_norm():
    cases = _norm_cases(lambda s, dt: (randn(s[-1:], dt, seed=1),))
    check_cases(_rms_norm, cases[:-1], grad=True)
    # bf16: the weight grad sums 300 products that eager rounds to bf16 one by one (error about
    # sqrt(300) * 2**-9 * |term| ~ 0.05), the kernel sums them in fp32; the fp32 reference cannot
    # judge it because it has no bf16 cast inside
    check_cases(_rms_norm, cases[-1:], grad=True, low_atol=0.1)


def test_rms_norm_functional():
    check_cases(lambda x, w: F.rms_norm(x, x.shape[-1:], w, eps=1e-6),
                _norm_cases(lambda s, dt: (randn(s[-1:], dt, seed=1),)), grad=True)


@pytest.mark.parametrize("n,v", [(1, 2), (300, 130), (8, 1000)], ids=str)
def test_cross_entropy(n, v):
    g = torch.Generator().manual_seed(3)
    t = torch.randint(0, v, (n,), generator=g)
    cases = [(randn((n, v)), t), (randn((n, v), torch.bfloat16), t)]
    check_cases(lambda x, t: (F.cross_entropy(x, t), F.cross_entropy(x.float(), t, reduction="none")),
                cases, grad=True)


def test_cross_entropy_ignore_index():
    t = torch.randint(0, 50, (300,), generator=torch.Generator().manual_seed(4))
    t[::3] = -100
    t[-40:] = -100  # a padded tail: whole partition tiles of ignored labels
    check_cases(lambda x, t: F.cross_entropy(x, t, ignore_index=-100),
                [(randn((300, 50)), t), (randn((300, 50), torch.bfloat16), t)], grad=True)


# --- reductions broadcast back with the right shape ----------------------------------------------

@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_std_mean_backward_every_axis(dim):
    """Returning both ``std`` and ``mean``: the backward divides the std's gradient by the std, a
    [5, 5] value in the reduced space that is broadcast back with ``unsqueeze(dim)``. Its shape
    alone aligns it to the domain's trailing axes; x.grad was off by up to 1.4 for dim=1, 2."""
    x = torch.randn(5, 5, 5, generator=torch.Generator().manual_seed(3))
    check_cases(lambda x: torch.std_mean(x, dim=dim), [(x,)], grad=True)


def test_cosine_embedding_loss():
    """``y == 1`` ([5]) selects between values computed from row sums: it lives in the reduced space
    of the [5, 5] domain, not along its last axis (was ``operand0 must be a [5, 1] region, got
    [5, 5]`` in the simulator)."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 5, generator=g), torch.randn(5, 5, generator=g)
    y = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0])
    check_cases(lambda a, b, y: F.cosine_embedding_loss(a, b, y), [(a, b, y)], grad=True)


@pytest.mark.parametrize("shape", [(0, 7), (7, 0), (3, 0, 5)], ids=str)
def test_reduction_over_zero_rows(shape):
    """A reduction over an empty extent gives the identity (mean: nan) and compiles; it was an IR
    verifier error that sent the whole graph to eager."""
    z = torch.randn(shape)
    check_cases(lambda z: (z.sum(0), z.sum(-1) + 1, z.mean(-1), z.prod(0) * 2, (z > 0).any(-1),
                           z.sum()), [(z,)])
