"""Matmul lowerings against eager, forward and backward: mm/bmm/addmm/baddbmm/matmul with batch
broadcasting, K>128 (PSUM accumulation), M>128, N>512, ragged tiles, transposed operands, epilogues,
and scaled_dot_product_attention (causal, boolean and float masks)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from _ops import check_cases, randn

from neuron_inductor import stats


def _pair(sa, sb, dtype=torch.float32):
    return randn(sa, dtype), randn(sb, dtype, seed=1)


# (M, K, N): single element, ragged everything, K > 128, M > 128, N > 512
MKN = [(1, 1, 1), (300, 130, 70), (129, 257, 600), (5, 300, 513)]


@pytest.mark.parametrize("m,k,n", MKN, ids=str)
def test_mm(m, k, n):
    # fp32 dot products of up to 300 terms in a different (PSUM tile) order
    check_cases(torch.mm, [_pair((m, k), (k, n)), _pair((m, k), (k, n), torch.bfloat16)], grad=True,
                atol=1e-4)


def test_mm_transposed_operands():
    a, b = randn((130, 300)), randn((600, 130), seed=1)
    check_cases(lambda a, b: (a.t() @ b.t(), a.t() @ a), [(a, b)], grad=True, atol=1e-4)


def test_addmm_linear_epilogue():
    x, w, bias = randn((300, 130)), randn((600, 130), seed=1), randn((600,), seed=2)
    check_cases(lambda x, w, b: (torch.addmm(b, x, w.t()), F.gelu(F.linear(x, w, b)),
                                 torch.addmm(b, x, w.t(), beta=0.5, alpha=2.0)),
                [(x, w, bias)], grad=True, atol=1e-4, rtol=1e-4)  # x.grad sums 3 x 600 products


def test_bmm_baddbmm():
    a, b, c = randn((3, 129, 140)), randn((3, 140, 520), seed=1), randn((3, 129, 520), seed=2)
    check_cases(lambda a, b, c: (torch.bmm(a, b), torch.baddbmm(c, a, b, alpha=0.5)), [(a, b, c)],
                grad=True, atol=1e-4)


@pytest.mark.parametrize("sa,sb", [((2, 3, 5, 130), (130, 7)), ((2, 1, 5, 130), (3, 130, 7)),
                                   ((130,), (2, 130, 7)), ((5, 130), (130,)), ((130,), (130,))],
                         ids=str)
def test_matmul_broadcast(sa, sb):
    check_cases(torch.matmul, [_pair(sa, sb), _pair(sa, sb, torch.bfloat16)], grad=True, atol=1e-4)


def test_mlp_residual_epilogue_one_kernel_per_matmul():
    x, w = randn((300, 130)), randn((130, 130), seed=1)
    stats.reset("compile")
    check_cases(lambda x, w: torch.relu(x @ w) + x, [(x, w)], atol=1e-4)
    assert stats.compiled()["kernels_generated"] == 1


def _qkv(b, h, s, d, dtype=torch.float32):
    return tuple(randn((b, h, s, d), dtype, seed=i) for i in range(3))


@pytest.mark.parametrize("kind", ["causal", "bool_mask", "float_mask", "none"])
def test_sdpa(kind):
    g = torch.Generator().manual_seed(5)
    bool_mask = torch.rand(1, 1, 130, 130, generator=g) > 0.3
    bool_mask[..., 0] = True   # no fully masked row (eager gives NaN there)
    float_mask = torch.randn(2, 1, 130, 130, generator=g)

    def fn(q, k, v):
        if kind == "causal":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if kind == "bool_mask":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask)
        if kind == "float_mask":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask.to(q.dtype))
        return F.scaled_dot_product_attention(q, k, v)
    check_cases(fn, [_qkv(2, 2, 130, 16), _qkv(2, 2, 130, 16, torch.bfloat16)], grad=True,
                atol=1e-4)


def test_sdpa_single_token():
    check_cases(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                [_qkv(1, 1, 1, 8)], grad=True)
