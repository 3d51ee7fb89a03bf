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

from neuron_inductor import compile as nic  # noqa: E402


def randn(shape, dtype=torch.float32, positive: bool = False, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    if positive:
        x = x.abs() + 0.5
    return x.to(dtype)


def _flat(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def check_cases(fn: Callable, cases: Sequence[Sequence], grad: bool = False, rtol=None, atol=None,
                **options) -> list:
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
    nic.fallback_ops.clear()
    torch._dynamo.reset()
    options.setdefault("fallback", "error")
    expected = whole(*ea)
    got = torch.compile(whole, backend="neuron", options=options)(*ca)
    assert not nic.fallback_ops, dict(nic.fallback_ops)

    def t(dtype):
        d = dict(tol(dtype))
        if rtol is not None:
            d["rtol"] = rtol
        if atol is not None:
            d["atol"] = atol
        return d
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        if isinstance(e, torch.Tensor):
            assert g.dtype == e.dtype and g.shape == e.shape, (i, g.dtype, g.shape, e.dtype, e.shape)
            torch.testing.assert_close(g, e, **t(e.dtype), equal_nan=True, msg=lambda m: f"output {i}: {m}")
        else:
            assert g == e
    if grad:
        pairs = [(g, e) for g, e in zip(got, expected)
                 if isinstance(e, torch.Tensor) and e.requires_grad]
        seeds = [torch.randn(e.shape, generator=torch.Generator().manual_seed(7)).to(e.dtype)
                 for _, e in pairs]
        torch.autograd.backward([e for _, e in pairs], seeds)
        torch.autograd.backward([g for g, _ in pairs], seeds)
        for i, (c, e) in enumerate(zip(ca, ea)):
            if isinstance(e, torch.Tensor) and e.requires_grad and e.grad is not None:
                torch.testing.assert_close(c.grad, e.grad, **t(e.dtype),
                                           msg=lambda m: f"grad of input {i}: {m}")
        assert not nic.fallback_ops, dict(nic.fallback_ops)  # the backward compiles lazily
    return list(got)
