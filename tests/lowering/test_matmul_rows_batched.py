"""A batched or wide GEMM inside the row loop of the softmax (or any row reduction) that reads it
(lowering/matmul/rows.py, up to 8 PSUM banks of columns, rhs resident per batch entry): one kernel
instead of the GEMM's output stored and read back, against eager in fp32 and bf16, ragged rows /
columns / K, non-finite rows staying in their rows (trn1 and trn2), forward and backward, and the
modelled NKIBench bmm_softmax."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from _ops import check_cases

from neuron_inductor import stats

F32, BF16 = torch.float32, torch.bfloat16


def _ab(b, m, k, n, dtype=F32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, m, k, generator=g).to(dtype), torch.randn(b, k, n, generator=g).to(dtype)


def bmm_softmax(a, b):
    return torch.softmax(torch.bmm(a, b), dim=2)


def _kernels(fn, cases, **kw) -> tuple[int, list]:
    stats.reset("compile")
    out = check_cases(fn, cases, **kw)
    return stats.compiled()["kernels_generated"], out


@pytest.mark.parametrize("target", ["trn2", "trn1"])
def test_bmm_softmax_one_kernel_ragged(target):
    """100 rows x 200 columns per batch entry (one ragged row tile), 130 x 1100 with K = 200 (two row
    tiles, three PSUM banks with a ragged last one, two K steps), 2 x 4096 columns (all 8 banks)."""
    for case in (_ab(3, 100, 40, 200), _ab(2, 130, 200, 1100, seed=1), _ab(2, 2, 16, 4096, seed=2)):
        n, _ = _kernels(bmm_softmax, [case], atol=1e-5, target=target)
        assert n == 1


def test_bmm_softmax_bf16():
    n, _ = _kernels(bmm_softmax, [_ab(2, 100, 64, 700, BF16)])
    assert n == 1


def test_wide_mm_softmax_2d():
    """A 2-D GEMM of more than one PSUM bank of columns (N = 1000) feeding a softmax: one kernel."""
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(300, 96, generator=g), torch.randn(96, 1000, generator=g)
    n, _ = _kernels(lambda x, w: torch.softmax(x @ w, -1), [(x, w)], atol=1e-5)
    assert n == 1


@pytest.mark.parametrize("target", ["trn2", "trn1"])
def test_masked_rows_and_nan_stay_in_their_rows(target):
    """A padding mask added to the scores with one row all -inf (eager: NaN there), and a NaN in one
    lhs row of another batch entry: only those rows are NaN."""
    a, b = _ab(2, 100, 40, 600, seed=4)
    a[1, 57, 3] = float("nan")
    mask = torch.zeros(2, 100, 600)
    mask[0, :, 500:] = float("-inf")   # padded keys
    mask[0, 9] = float("-inf")         # a row with no key left
    fn = lambda a, b, m: torch.softmax(torch.bmm(a, b) + m, dim=2)  # noqa: E731
    n, (out,) = _kernels(fn, [(a, b, mask)], atol=1e-5, target=target)
    assert n == 1
    bad = out.isnan().any(-1)
    assert bad[0, 9] and bad[1, 57] and int(bad.sum()) == 2
    assert (out[0, :9, 500:] == 0).all()


def test_forward_and_backward():
    n, _ = _kernels(bmm_softmax, [_ab(2, 130, 40, 700, seed=5)], grad=True, atol=1e-5)
    assert n >= 2


def test_softmax_over_rows_is_not_fused_but_exact():
    _kernels(lambda a, b: torch.softmax(torch.bmm(a, b), dim=1), [_ab(2, 100, 40, 600, seed=6)], atol=1e-5)


def test_modelled_nkibench_bmm_softmax():
    """NKIBench's bmm_softmax (B16 M4096 K64 N4096 fp32, trn1): one kernel, the scores written once,
    at or below the hand-written kernel's measured 12 ms."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import nkibench
    r = nkibench.compile_and_price("bmm_softmax")
    assert r["fallbacks"] == 0 and r["findings"] == 0 and r["kernels"] == 1
    assert r["ratio"] <= 1.0
    assert r["cost"].hbm_bytes < 1.2 * 16 * 4096 * 4096 * 4
