"""Skinny matmuls (``lowering/matmul/skinny.py``): M of 1..8 rows per batch entry, as in decoding.

Numerics against eager in fp32 and bf16, forward and backward, with ragged K and N (not multiples of
128 / 512), weights in both layouts (``x @ W^T`` of nn.Linear and ``x @ W``), batched bmm with one row
per entry (batch on partitions, block-diagonal stationary) and with several, and the attention forms
of a decode step (``q @ K^T * scale + mask``, ``p @ V``). The plan choice and its modelled speed on
decode shapes are pinned against the calibrated cost model (traced on meta tensors, nothing runs)."""
from __future__ import annotations

import math

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from _ops import check_cases, randn

from neuron_inductor import pipeline
from neuron_inductor.config import get_config
from neuron_inductor.costmodel import estimate_program
from neuron_inductor.graph.passes import run_passes
from neuron_inductor.target import get_target

BF16 = torch.bfloat16


@pytest.mark.parametrize("m", [1, 3, 8])
def test_linear_rows_ragged(m):
    # W^T operand (rows of W contiguous: transposed on TensorE), K and N ragged, with a fused epilogue
    x, w, b = randn((m, 300)), randn((600, 300), seed=1), randn((600,), seed=2)
    cases = [(x, w, b), (x.to(BF16), w.to(BF16), b.to(BF16))]
    check_cases(lambda x, w, b: torch.relu(x @ w.t() + b), cases, grad=True, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("k,n", [(300, 700), (2100, 1030)], ids=str)
def test_gemv_row_dots(k, n):
    # one row against W^T with N >= 512: the first 128 columns of every 512-column tile are row dot
    # products (GpSimd multiply, VectorE sum over K pieces of 2048), the rest TensorE; ragged tails
    x, w, b = randn((1, k)), randn((n, k), seed=1), randn((n,), seed=2)
    cases = [(x, w, b), (x.to(BF16), w.to(BF16), b.to(BF16))]
    check_cases(lambda x, w, b: x @ w.t() * 0.5 + b, cases, grad=True, atol=1e-4, rtol=1e-4)


def test_gemv_dots_only_on_trn1():
    # NeuronCore-v2 transposes through VectorE 32 x 32 blocks (its TensorE transpose is not exact),
    # so one row against W^T is row dot products only; ragged N (a last tile of 88 columns)
    x, w = randn((1, 300)), randn((600, 300), seed=1)
    check_cases(lambda x, w: torch.relu(x @ w.t()) * 2.0, [(x, w), (x.to(BF16), w.to(BF16))], grad=True,
                atol=1e-4, rtol=1e-4, target="trn1")


@pytest.mark.parametrize("m,k,n", [(1, 130, 70), (3, 257, 600), (8, 64, 1030)], ids=str)
def test_mm_kmajor_ragged(m, k, n):
    a, b = randn((m, k)), randn((k, n), seed=1)
    check_cases(torch.mm, [(a, b), (a.to(BF16), b.to(BF16))], grad=True, atol=1e-4)


@pytest.mark.parametrize("bsz,m", [(5, 1), (3, 3), (2, 8)], ids=str)
def test_bmm_batched_ragged(bsz, m):
    # both rhs layouts; one row per entry puts the entries on partitions
    a, b, c = randn((bsz, m, 200)), randn((bsz, 200, 130), seed=1), randn((bsz, 130, 200), seed=2)
    cases = [(a, b, c), (a.to(BF16), b.to(BF16), c.to(BF16))]
    check_cases(lambda a, b, c: (torch.bmm(a, b), torch.bmm(a, c.transpose(1, 2)) * 0.5),
                cases, grad=True, atol=1e-4)


@pytest.mark.parametrize("bsz", [3, 8])
def test_bmm_shared_rhs(bsz):
    # one row per entry against one weight broadcast over the batch (stride 0): the entries become
    # the output rows of one GEMM, the weight read once; both weight layouts (separate lhs, so no
    # input gradient is a sum of two bf16 GEMMs that eager happens to round favourably)
    x, y, w = randn((bsz, 1, 300)), randn((bsz, 1, 300), seed=2), randn((600, 300), seed=1)
    cases = [(x, y, w), (x.to(BF16), y.to(BF16), w.to(BF16))]
    check_cases(lambda x, y, w: (torch.bmm(x, w.t().unsqueeze(0).expand(bsz, 300, 600)) + 1.0,
                                 torch.bmm(y, w[:300].unsqueeze(0).expand(bsz, 300, 300))),
                cases, grad=True, atol=1e-4, rtol=1e-4)


def test_decode_attention_forms():
    # a decode step's products over a cache: q @ K^T * scale + mask over heads, then p @ V
    q, k, v = randn((2, 4, 1, 64)), randn((2, 4, 300, 64), seed=1), randn((2, 4, 300, 64), seed=2)
    mask = torch.where(torch.arange(300) < 250, 0.0, float("-inf")).view(1, 1, 1, 300)

    def step(q, k, v, mask):
        s = q @ k.transpose(2, 3) / math.sqrt(64) + mask
        return torch.softmax(s.float(), dim=-1).to(q.dtype) @ v
    check_cases(step, [(q, k, v, mask), (q.to(BF16), k.to(BF16), v.to(BF16), mask.to(BF16))],
                grad=True, atol=1e-4)


def _kernels(fn, shapes, target="trn2"):
    args = [torch.empty(s, dtype=BF16, device="meta") for s in shapes]
    gm = make_fx(lambda *a: (fn(*a),), tracing_mode="fake")(*args)
    lg = pipeline.partition_and_lower(run_passes(gm), get_config().replace(target=target, cache=False), "skinny")
    return [k for k in lg.program.kernels if "mm" in k.name]


def _hbm_bound(shapes) -> float:
    return sum(math.prod(s) * 2 for s in shapes) / get_target("trn2").hbm_bytes_per_s


@pytest.mark.parametrize("name,fn,shapes,ratio", [
    # one head-batched product over a 2048-position cache each; the general plan modelled 170 us
    # (q K^T: epilogue on one partition per head) and 669 us (p V: one lhs DMA per k tile)
    ("qk", lambda q, k: q @ k.transpose(1, 2), [(32, 1, 128), (32, 2048, 128)], 2.0),
    ("pv", lambda p, v: p @ v, [(32, 1, 2048), (32, 2048, 128)], 2.0),
    # GEMV against an nn.Linear weight: the general plan's ScalarE-only evictions made it 1.31x and
    # 1.86x (K = 11008) the HBM time
    ("gemv", lambda x, w: x @ w.t(), [(1, 4096), (4096, 4096)], 1.2),
    ("gemv_down", lambda x, w: x @ w.t(), [(1, 11008), (4096, 11008)], 1.2),
], ids=lambda v: v if isinstance(v, str) else "")
def test_decode_products_near_hbm_bound(name, fn, shapes, ratio):
    (k,) = _kernels(fn, shapes)
    assert k.plan.startswith("skinny matmul"), k.plan
    seconds = estimate_program([k], get_target("trn2")).seconds
    assert seconds <= ratio * _hbm_bound(shapes), (name, seconds, _hbm_bound(shapes), k.plan)


def test_batch_on_partitions_plan():
    (k,) = _kernels(lambda q, k: q @ k.transpose(1, 2), [(32, 1, 128), (32, 512, 128)])
    assert "one batch entry per output partition" in k.plan
    (k,) = _kernels(lambda a, b: a @ b, [(4, 3, 256), (4, 256, 512)])
    assert "3 output row(s) on partitions" in k.plan
    (k,) = _kernels(lambda x, w: x @ w.t(), [(1, 256), (1024, 256)])
    assert "row dot products" in k.plan
    (k,) = _kernels(lambda x, w: torch.bmm(x, w.t().unsqueeze(0).expand(8, 512, 1024)), [(8, 1, 512), (1024, 512)])
    assert "the rhs shared by every batch entry" in k.plan
    (k,) = _kernels(lambda x, w: x @ w.t(), [(1, 256), (600, 256)], "trn1")
    assert "every column as row dot products" in k.plan
    assert estimate_program([k], get_target("trn2")).hbm_bytes < 1.1 * 1024 * 512 * 2
