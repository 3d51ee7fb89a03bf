"""Compare a function compiled with backend="neuron" against eager PyTorch, forward and backward."""
from __future__ import annotations

import torch

# fp32: the simulator computes in fp32 like eager, so only summation order differs.
FP32 = dict(rtol=1e-5, atol=1e-5)
# bf16 has an 8-bit mantissa (eps = 2**-7 = 0.0078): a few roundings of the same value differ by a
# couple of ulps, so 2 eps relative plus a small absolute floor for values near zero.
BF16 = dict(rtol=1.6e-2, atol=1e-2)


def tol(dtype: torch.dtype) -> dict:
    return BF16 if dtype in (torch.bfloat16, torch.float16) else FP32


def run_compiled(fn, *args, **options):
    torch._dynamo.reset()
    return torch.compile(fn, backend="neuron", options=options or None)(*args)


def check(fn, *args, grad: bool = False, atol=None, rtol=None, **options):
    """Forward (and with ``grad``, backward w.r.t. every floating input) match eager."""
    def clone(a):
        if isinstance(a, torch.Tensor):
            c = a.detach().clone()
            if grad and c.is_floating_point():
                c.requires_grad_(True)
            return c
        return a
    ea = [clone(a) for a in args]
    ca = [clone(a) for a in args]
    expected = fn(*ea)
    got = run_compiled(fn, *ca, **options)
    dt = expected.dtype if isinstance(expected, torch.Tensor) else torch.float32
    t = dict(tol(dt))
    if atol is not None:
        t["atol"] = atol
    if rtol is not None:
        t["rtol"] = rtol
    torch.testing.assert_close(got, expected, **t, equal_nan=True)
    if grad:
        outs_e = expected if isinstance(expected, (tuple, list)) else (expected,)
        outs_c = got if isinstance(got, (tuple, list)) else (got,)
        seeds = [torch.randn_like(o) for o in outs_e]
        torch.autograd.backward(outs_e, seeds)
        torch.autograd.backward(outs_c, seeds)
        for a, b in zip(ca, ea):
            if isinstance(a, torch.Tensor) and a.requires_grad:
                torch.testing.assert_close(a.grad, b.grad, **t)
    return got
