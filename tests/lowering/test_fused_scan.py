"""fp32 ``cumsum`` / ``cumprod`` along the last axis join fused groups (``lowering/fused/scan.py``).

mamba's selective scan (two cumsums between pointwise work, then a sum over the middle axis) was
five kernels writing and re-reading ``[256, 16, 7168]`` fp32 intermediates; it is now one kernel
whose scans carry their running value across free chunks (and across the reduced loop's rows).
These tests pin the grouping and check every kind of carry against eager on ragged sizes.
"""
from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from _ops import check_cases, randn

from neuron_inductor.config import Config
from neuron_inductor.graph.passes import run_passes
from neuron_inductor.ir.printer import format_kernel
from neuron_inductor.pipeline import partition_and_lower


def mamba(delta, u, a, b, c):
    """benchmarks/nkibench.py's selective scan."""
    s = torch.cumsum(delta[:, None, :] * a[:, :, None], dim=-1)
    bu = delta[:, None, :] * b[None] * u[:, None, :]
    h = torch.exp(s) * torch.cumsum(torch.exp(-s) * bu, dim=-1)
    return (c[None] * h).sum(dim=1)


def _mamba_args(d, n, length):
    return (0.01 * randn((d, length), positive=True), randn((d, length), seed=1),
            -randn((d, n), positive=True, seed=2), randn((n, length), seed=3), randn((n, length), seed=4))


def _kernels(fn, *args, **cfg):
    def traced(*a):
        out = fn(*a)
        return out if isinstance(out, tuple) else (out,)
    lg = partition_and_lower(run_passes(make_fx(traced)(*args)), Config(fallback="error", **cfg))
    return list(lg.program.kernels)


def _ops(k) -> list[str]:
    out = []

    def walk(body):
        for s in body:
            if hasattr(s, "body"):
                walk(s.body)
            elif hasattr(s, "op"):
                out.append(s.op)
    walk(k.body)
    return out


def test_mamba_is_one_kernel_with_both_scans():
    (k,) = _kernels(mamba, *_mamba_args(256, 16, 600), free_chunk=256)
    assert _ops(k).count("tensor_tensor_scan") == 2
    assert "alloc carry" in format_kernel(k)  # 600 in chunks of 256: running values cross chunks


def test_scan_along_another_axis_keeps_its_kernel():
    ks = _kernels(lambda x: (torch.cumsum(x * 2, 0),), torch.randn(64, 300))
    assert len(ks) == 2


def test_mamba_matches_eager():
    """600 = 256 + 256 + 88 (ragged chunks, carries per row of the reduced loop), 130 = 128 + 2 rows."""
    check_cases(mamba, [_mamba_args(130, 5, 600), _mamba_args(40, 3, 64)], free_chunk=256,
                atol=1e-4, rtol=1e-4)


def test_fused_scans_match_eager():
    """Scans in elementwise chains (chunked, carries), before a row reduction over the scanned axis,
    after one (single pass), a 1-D scan (never split into rows) and the backward; a cumprod (forward:
    its backward needs ``max`` of a bool mask, which has no lowering)."""
    def fn(x, y, z):
        c = torch.cumsum(x * 2, -1).exp()
        r = (torch.cumsum(x, -1) * y).sum(-1)
        p = torch.cumsum(torch.softmax(y, -1), -1)
        return c, r, p, torch.cumsum(z * z, 0)

    cases = [(0.01 * randn((200, 1000)), randn((200, 1000), seed=1), randn((5000,), seed=2)),
             (0.01 * randn((3, 7, 33)), randn((3, 7, 33), seed=3), randn((1,), seed=4))]
    check_cases(fn, cases, grad=True, free_chunk=256, atol=1e-4, rtol=1e-4)
    check_cases(lambda y: torch.cumprod(1 + 0.01 * y, -1) - 1, [c[1:2] for c in cases], free_chunk=256,
                atol=1e-4, rtol=1e-4)


def test_a_scan_no_fused_kernel_holds_gets_its_own_kernel(monkeypatch):
    """A lone scan group that does not lower as a fused kernel is the standalone scan kernel again
    (it used to become an eager fallback)."""
    from neuron_inductor.lowering.fused import scan as fused_scan
    from neuron_inductor.lowering.layout import LoweringError

    def refuse(*a, **k):
        raise LoweringError("refused")
    monkeypatch.setattr(fused_scan, "scan_value", refuse)
    (k,) = _kernels(lambda x: (torch.cumsum(x, -1),), torch.randn(64, 300))
    assert k.plan.startswith("cumsum along dim 1") and "tensor_tensor_scan" in _ops(k)
