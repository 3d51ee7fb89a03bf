"""Op-test helper: one torch.compile covers several shapes/dtypes of the same op.

Compiling is the slow part of a simulator test (Dynamo + AOTAutograd, ~0.25 s), so each test runs
its op on every case inside one compiled function and compares each output with eager using the
tolerance of *its* dtype (tests/_compare.py), forward and backward, with fallbacks forbidden.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _compare import tol  # noqa: E402

from neuron_inductor import stats  # noqa: E402


LOW = (torch.bfloat16, torch.float16)


def randn(shape, dtype=torch.float32, positive: bool = False, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    if positive:
        x = x.abs() + 0.5
    return x.to(dtype)


def _flat(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def check_cases(fn: Callable, cases: Sequence[Sequence], grad: bool = False, rtol=None, atol=None,
                low_rtol=None, low_atol=None, _allow_fallback: bool = False, **options) -> list:
    """``fn(*case)`` for every case in ONE compiled graph; every output and input grad vs eager."""
    cases = [tuple(c) for c in cases]
    sizes = [len(c) for c in cases]

    def whole(*flat):
        outs, i = [], 0
        for n in sizes:
            outs += _flat(fn(*flat[i:i + n]))
            i += n
        return tuple(outs)

    def prep(a):
        if not isinstance(a, torch.Tensor):
            return a
        c = a.detach().clone()
        if grad and c.is_floating_point():
            c.requires_grad_(True)
        return c
    flat = [a for c in cases for a in c]
    ea, ca = [prep(a) for a in flat], [prep(a) for a in flat]
    stats.reset("fallback_ops")
    torch._dynamo.reset()
    options.setdefault("fallback", "error")
    expected = whole(*ea)
    got = torch.compile(whole, backend="neuron", options=options)(*ca)
    assert _allow_fallback or not stats.fallback_ops(), dict(stats.fallback_ops())

    def t(dtype):
        d = dict(tol(dtype))
        if dtype in LOW:   # overrides: low_rtol/low_atol for bf16/fp16, rtol/atol for the rest
            d.update({k: v for k, v in (("rtol", low_rtol), ("atol", low_atol)) if v is not None})
        else:
            d.update({k: v for k, v in (("rtol", rtol), ("atol", atol)) if v is not None})
        return d
    # fp32 reference for low-precision values: eager bf16 rounds every intermediate, our fused
    # kernels keep fp32 on chip, so where the two differ we require ours to be no further from
    # fp32 math than eager is (plus the dtype's tolerance)
    ra = [a.detach().float().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor)
          and a.dtype in LOW else (a.detach().clone().requires_grad_(a.requires_grad)
                                   if isinstance(a, torch.Tensor) else a) for a in ea]
    ref = whole(*ra)

    def close(g, e, r, what):
        try:
            torch.testing.assert_close(g, e, **t(e.dtype), equal_nan=True, msg=lambda m: f"{what}: {m}")
        except AssertionError:
            if e.dtype not in LOW:
                raise
            d = t(e.dtype)
            r = r.detach().float()
            ours, theirs = (g.detach().float() - r).abs(), (e.detach().float() - r).abs()
            # a NaN of ours compares False: count it as bad unless eager has one there too
            bad = (ours > theirs + d["atol"] + d["rtol"] * r.abs()) | (ours.isnan() & ~theirs.isnan())
            assert not bad.any(), f"{what}: {int(bad.sum())} element(s) further from fp32 than eager"
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        if isinstance(e, torch.Tensor):
            assert g.dtype == e.dtype and g.shape == e.shape, (i, g.dtype, g.shape, e.dtype, e.shape)
            close(g, e, ref[i], f"output {i}")
        else:
            assert g == e
    if grad:
        idx = [i for i, e in enumerate(expected) if isinstance(e, torch.Tensor) and e.requires_grad]
        seeds = [torch.randn(expected[i].shape, generator=torch.Generator().manual_seed(7))
                 .to(expected[i].dtype) for i in idx]
        torch.autograd.backward([expected[i] for i in idx], seeds)
        torch.autograd.backward([got[i] for i in idx], seeds)
        torch.autograd.backward([ref[i] for i in idx], [s.to(ref[i].dtype) for s, i in zip(seeds, idx)])
        for i, (c, e) in enumerate(zip(ca, ea)):
            if isinstance(e, torch.Tensor) and e.requires_grad and e.grad is not None:
                close(c.grad, e.grad, ra[i].grad, f"grad of input {i}")
        assert _allow_fallback or not stats.fallback_ops(), dict(stats.fallback_ops())  # bw compiles lazily
    return list(got)
