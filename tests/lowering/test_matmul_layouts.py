"""The blocked GEMM's layout paths against eager: row-major lhs and nn.Linear's W^T (TensorE
transposes through PSUM), transposed views (direct loads), M blocks of 1/2/4/8 tiles, paired column
tiles, ragged M/N/K with K > 128, fused epilogues; fp32 and bf16, forward and backward."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from _ops import check_cases, randn

# fp32 sums of a few hundred O(1) products differ from eager's order by ~1e-5 absolute
F32_TOL = dict(rtol=1e-4, atol=1e-4)


def _tol(dtype):
    return F32_TOL if dtype == torch.float32 else {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mm_blocks_and_ragged(dtype):
    # M tiles 2 (block 2), 4 (block 4), 3 (block 1), 5 (block 1), 8 (block 8); N tiles 1, 2 (paired), 3
    shapes = [(130, 200, 96), (512, 300, 1024), (300, 64, 1000), (520, 129, 40), (1024, 136, 130),
              (200, 512, 96)]
    cases = [(randn((m, k), dtype, seed=i), randn((k, n), dtype, seed=10 + i))
             for i, (m, k, n) in enumerate(shapes)]
    check_cases(lambda a, b: a @ b, cases, grad=True, **_tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_weight_transposed_with_epilogue(dtype):
    # x @ W^T: both operands have the contraction axis contiguous -> TensorE transposes on both sides;
    # N=1000 and 600 leave a ragged last column tile with empty 128-column sub-blocks; K=512 and 256
    # gather 4 / 2 transposed k tiles per PSUM bank (ragged row tiles leave unread gaps in them)
    cases = [(randn((m, k), dtype, seed=m), randn((n, k), dtype, seed=n), randn((n,), dtype, seed=k))
             for m, k, n in ((256, 200, 1000), (130, 600, 600), (64, 300, 130), (130, 512, 300),
                             (200, 256, 520))]
    check_cases(lambda x, w, b: F.silu(F.linear(x, w, b)), cases, grad=True, **_tol(dtype))


def test_transposed_lhs_view_and_bmm():
    check_cases(lambda x, y: x.t() @ y, [(randn((200, 130)), randn((200, 520)))], grad=True, **F32_TOL)
    check_cases(lambda x, y: torch.bmm(x, y) * 0.5, [(randn((3, 70, 150)), randn((3, 150, 90)))],
                grad=True, **F32_TOL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_weight_grad_ragged_blocks(dtype):
    # dW = dY^T @ X shapes: 710 rows are 6 row tiles (the last 70 rows), blocked as 4 + a ragged
    # block of 2; the block's lhs^T arrives in one DMA per k tile whose last rows are partial
    cases = [(randn((150, 710), dtype, seed=3), randn((150, 300), dtype, seed=4)),
             (randn((260, 390), dtype, seed=5), randn((260, 520), dtype, seed=6))]
    check_cases(lambda g, x: g.t() @ x, cases, grad=True, **_tol(dtype))
