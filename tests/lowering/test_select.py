"""max.dim / min.dim / argmax / argmin / small-k topk (graph/decompositions_select.py) against eager:
values and indices on every axis of ragged shapes spanning several 128-row tiles, torch's tie rule
(first index), NaN (it wins, its first index is returned), infinities, fp32, bf16 and narrow ints;
backward (the gradient scattered into zeros at the indices) with no fallback anywhere."""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from _ops import check_cases, randn

from neuron_inductor.graph.decompositions import decomposition_table

aten = torch.ops.aten


def _hard(shape, dtype=torch.float32, seed=0) -> torch.Tensor:
    """Random values with exact ties (a repeated column), an infinity and a NaN in some rows."""
    x = randn(shape, torch.float32, seed=seed)
    x[..., 3] = x[..., -1]                      # ties along the last axis
    x.view(-1)[7] = float("inf")
    x.view(-1)[-5] = -float("inf")
    x.view(-1)[x.numel() // 2] = float("nan")
    x.view(-1)[x.numel() // 2 + 1] = float("nan")   # two NaNs: the first one's index
    return x.to(dtype)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_max_min_dim_values_indices(dim):
    """Forward on every axis, fp32 and bf16, ties, infinities and NaN."""
    cases = [(_hard((3, 300, 130)),), (_hard((2, 129, 150), torch.bfloat16, seed=1),),
             (_hard((1, 1, 11)),)]
    check_cases(lambda x: (*torch.max(x, dim), *torch.min(x, dim, keepdim=True)), cases)


def test_ties_take_the_first_index():
    x = torch.zeros(5, 260)
    x[1, 7] = x[1, 200] = 3.0
    x[2, :] = 1.0
    x[3, 130] = x[3, 129] = -2.0
    got = check_cases(lambda x: (*torch.max(x, -1), torch.argmin(x, -1), torch.argmax(x, 0)), [(x,)])
    assert got[1].tolist() == [0, 7, 0, 0, 0]


def test_argmax_argmin_flat_keepdim_and_narrow_ints():
    x = _hard((4, 300, 7))
    i16 = torch.randint(-30000, 30000, (300, 133), generator=torch.Generator().manual_seed(3)).to(torch.int16)
    u8 = torch.randint(0, 255, (140, 50), generator=torch.Generator().manual_seed(4)).to(torch.uint8)
    cases = [(x,), (i16,), (u8,)]
    check_cases(lambda x: (torch.argmax(x), torch.argmin(x, 1, keepdim=True), torch.argmax(x, 0),
                           torch.max(x, -1)[0], torch.argmax(x, keepdim=True)), cases)


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_max_dim_backward(dim):
    """Backward: the gradient goes to the first max of each row, zeros elsewhere."""
    x = randn((3, 200, 131))
    x[..., 5] = x[..., 6]    # a tie: the gradient goes to the first
    cases = [(x,), (randn((2, 130, 9), torch.bfloat16, seed=2),)]
    check_cases(lambda x: torch.max(x, dim)[0] * 2 + torch.amin(x, dim) * 0, cases, grad=True)
    check_cases(lambda x: torch.min(x, dim, keepdim=True)[0].exp(), cases, grad=True)


def _distinct(shape, dtype=torch.float32, seed=0) -> torch.Tensor:
    """Rows of distinct values, distinct even after bf16 rounding of a softmax (spaced by 0.5)."""
    g = torch.Generator().manual_seed(seed)
    n = shape[-1]
    keys = torch.rand(*shape, generator=g).argsort(-1).float() * 0.5 - n / 4
    return keys.to(dtype)


@pytest.mark.parametrize("k", [1, 2, 8])
def test_topk_routing(k):
    """MoE routing: softmax over experts, top-k with indices, renormalised; forward and backward."""
    def route(logits):
        p = torch.softmax(logits, -1)
        w, i = torch.topk(p, k, dim=-1)
        return w / w.sum(-1, keepdim=True), i
    cases = [(randn((260, 64)),), (_distinct((3, 130, 8), torch.bfloat16, seed=1),), (randn((1, 8), seed=2),)]
    check_cases(route, cases, grad=True)


def _check_topk(x, k, dim, largest):
    """Tie order inside topk is unspecified in torch (its CPU kernel's order depends on the
    partial sort): values must equal eager's, indices must name them, be distinct and, among equal
    values, increase (the order documented for ours)."""
    torch._dynamo.reset()
    from neuron_inductor import stats
    stats.reset("fallback_ops")
    v, i = torch.compile(lambda x: torch.topk(x, k, dim, largest), backend="neuron",
                         options={"fallback": "error"})(x)
    ev, _ = torch.topk(x, k, dim, largest)
    assert not stats.fallback_ops()
    torch.testing.assert_close(v, ev, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(torch.gather(x, dim, i), v, rtol=0, atol=0, equal_nan=True)
    vs, is_ = v.movedim(dim, -1), i.movedim(dim, -1)
    assert (is_.sort(-1).values.diff(dim=-1) > 0).all()
    same = (vs[..., 1:] == vs[..., :-1]) | (vs[..., 1:].isnan() & vs[..., :-1].isnan())
    assert (is_.diff(dim=-1)[same] > 0).all()


@pytest.mark.parametrize("k, dim, largest", [(4, -1, True), (3, 0, False), (2, 1, True)])
def test_topk_ties_infinities_nan_smallest_and_other_axes(k, dim, largest):
    x = _hard((140, 33))
    x[5, :] = -float("inf")          # a row where every round picks an -inf
    x[6, :] = 1.0                    # all ties: indices 0..k-1 in order
    x[7, 20:] = float("inf")
    _check_topk(x, k, dim, largest)
    _check_topk(_hard((2, 150, 12), torch.bfloat16, seed=1), k, dim + 1 if dim >= 0 else dim, largest)


def test_topk_backward_other_axis():
    cases = [(randn((10, 300)),), (randn((9, 2, 129), seed=3),)]
    check_cases(lambda x: torch.topk(x, 5, dim=0)[0].sin(), cases, grad=True)


def test_large_k_is_left_to_the_fallback():
    """k above the routing sizes is a sort: the decomposition declines, the op stays a fallback."""
    gm = make_fx(lambda x: torch.topk(x, 9), decomposition_table=decomposition_table())(torch.randn(4, 20))
    assert any(n.target is aten.topk.default for n in gm.graph.nodes)
