"""A last-axis ``cat`` of two halves read only by elementwise ops becomes a select that fuses with
its producers and consumers: rotary embeddings (``rotate_half``) forward and backward are one
kernel each instead of neg + neg + cat + cat + multiply-add, with the same numbers as eager."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from neuron_inductor.pipeline import partition_and_lower
from neuron_inductor.config import get_config
from neuron_inductor.graph.passes import run_passes
from neuron_inductor.lowering.layout import refine_domain

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lowering"))
from _ops import check_cases, randn  # noqa: E402

aten = torch.ops.aten


def rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., :x.shape[-1] // 2]), -1)


def rotary(q, k, cos, sin):
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def _kernels(fn, shapes) -> list[str]:
    gm = make_fx(lambda *a: fn(*a), tracing_mode="fake")(*[torch.empty(s) for s in shapes])
    lg = partition_and_lower(run_passes(gm), get_config().replace(cache=False), "rot")
    assert not lg.fallbacks
    return [k.name for k in lg.program.kernels]


def test_rotary_forward_is_one_kernel():
    # was neg, neg, cat, cat, mul_add: five kernels and four HBM round trips of q/k halves; q and k
    # share one rotary kernel (graph.rotary_pattern)
    ks = _kernels(rotary, [(1, 4, 256, 64), (1, 4, 256, 64), (256, 64), (256, 64)])
    assert len(ks) == 1, ks


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_matches_eager_forward_and_backward(dtype):
    # head dim 128 and 64, 300 positions (ragged row tiles), a leading batch of 2; -0.0 and inf
    # pass through the select unchanged
    q = randn((2, 3, 300, 128), dtype, seed=1)
    q[0, 0, 0, 5] = -0.0
    q[1, 2, 7, 100] = float("inf")
    cases = [(q, randn((2, 3, 300, 128), dtype, seed=2), randn((300, 128), dtype, seed=3),
              randn((300, 128), dtype, seed=4)),
             tuple(randn(s, dtype, seed=5 + i) for i, s in
                   enumerate([(1, 2, 130, 64), (1, 2, 130, 64), (130, 64), (130, 64)]))]
    check_cases(rotary, cases, grad=True)


def test_cat_feeding_a_matmul_stays_a_cat():
    def fn(a, b, w):
        return torch.cat((a, b), -1) @ w
    gm = make_fx(fn, tracing_mode="fake")(torch.empty(8, 16), torch.empty(8, 16), torch.empty(32, 4))
    run_passes(gm)
    assert aten.cat.default in [n.target for n in gm.graph.nodes]


def test_refine_domain():
    assert refine_domain([2, 4, 128], [[2, 4, 2, 64]]) == [2, 4, 2, 64]
    assert refine_domain([1, 8, 128], [[8, 128]]) == [1, 8, 128]     # nothing finer: unchanged
    assert refine_domain([6, 4], [[4, 6]]) == [6, 4]                   # no common refinement


def test_unfused_build_keeps_the_cat():
    # with fusion off the select would only add kernels (and inflate the unfused baseline)
    gm = make_fx(rotary, tracing_mode="fake")(*[torch.empty(s) for s in
                                                [(1, 2, 8, 64), (1, 2, 8, 64), (8, 64), (8, 64)]])
    run_passes(gm, get_config().replace(fusion=False))
    assert aten.cat.default in [n.target for n in gm.graph.nodes]
