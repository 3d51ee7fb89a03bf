"""gather / scatter_add decompositions (graph/decompositions_gather.py): every legal index shape,
forward and backward against eager, with no op left to a host fallback."""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from neuron_inductor import stats
from neuron_inductor.graph.decompositions import decomposition_table
from tests._compare import check


def check_no_fallback(fn, *args, grad: bool = True):
    stats.reset("compile", "fallback_ops")
    check(fn, *args, grad=grad)
    assert not stats.fallback_ops(), dict(stats.fallback_ops())


@pytest.mark.parametrize("dim, xshape, ishape", [
    (1, (7, 16), (3, 1)),          # index shorter on the other dim
    (-1, (256, 300), (1, 1)),      # shorter on every dim
    (0, (9, 5, 4), (3, 2, 4)),     # leading axis, index shorter on dim 1
    (1, (4, 130, 3), (2, 7, 3)),   # middle axis, several picks per row
    (2, (3, 5, 77), (3, 5, 77)),   # as many picks as the row is long
])
def test_gather_index_shapes_fwd_bwd(dim, xshape, ishape):
    x = torch.randn(*xshape)
    idx = torch.randint(0, xshape[dim], ishape)
    check_no_fallback(lambda x, i: torch.gather(x, dim, i) * 0.25, x, idx)


def test_gather_repeated_indices_int32_and_bf16():
    x = torch.randn(5, 12)
    idx = torch.tensor([[3, 3, 3], [0, 11, 0]])  # repeats: the backward must add them up
    check_no_fallback(lambda x, i: torch.gather(x, 1, i).exp(), x, idx)
    check_no_fallback(lambda x, i: torch.gather(x, 0, i), x, idx.to(torch.int32)[:, :2].clamp(max=4))
    xb = torch.randn(6, 40).to(torch.bfloat16)
    check_no_fallback(lambda x, i: torch.gather(x, 1, i), xb, torch.randint(0, 40, (6, 5)), grad=False)


def test_wide_gather_is_a_flat_element_gather():
    """index elements x row length above the compare limit: one flat index_select, exact."""
    x = torch.randn(3, 4000)
    idx = torch.randint(0, 4000, (2, 300))
    gm = make_fx(lambda x, i: torch.gather(x, 1, i), decomposition_table=decomposition_table())(x, idx)
    assert any(n.target is torch.ops.aten.index_select.default for n in gm.graph.nodes)
    check_no_fallback(lambda x, i: torch.gather(x, 1, i) + 1, x, idx, grad=False)


def test_scatter_add_smaller_index_and_src():
    x = torch.randn(6, 10)
    idx = torch.tensor([[1, 1, 9], [0, 2, 2]])
    src = torch.randn(3, 4)  # bigger than the index: only its leading part is read
    # (eager's own backward refuses a src bigger than the index, so forward only there)
    check_no_fallback(lambda x, i, s: x.scatter_add(1, i, s), x, idx, src, grad=False)
    check_no_fallback(lambda x, i, s: x.scatter_add(0, i, s), x, idx.clamp(max=5), src[:2, :3])


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select_backward_any_axis_repeated_indices(dim):
    """index_select's backward is index_put(accumulate=True) on [None, .., idx]: a one-hot matmul
    with the indexed axis moved first; repeated indices add up."""
    x = torch.randn(5, 130, 3)
    idx = torch.tensor([2, 0, 2, 2, 1])
    check_no_fallback(lambda x, i: torch.index_select(x, dim, i).tanh(), x, idx)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_src_any_axis_few_positions(dim):
    """max.dim's and top-k's backward: the gradient scattered into zeros at the indices, on every
    axis, as one compare-and-select per index position (a permutation: no repeats)."""
    x = torch.randn(6, 130, 5)
    idx = torch.rand(6, 130, 5).argsort(dim).narrow(dim, 0, 3)
    check_no_fallback(lambda x, s, i: torch.zeros_like(x).scatter(dim, i, s * 2) + x,
                      x, torch.randn(idx.shape), idx)


def test_scatter_src_repeats_last_write_wins_and_smaller_index():
    """Repeated indices: the last position writes (torch's CPU loop order), with the chain (<= 8
    positions) and with the masked reduction (more); an index smaller than x on another dim leaves
    the rest of x untouched."""
    x = torch.randn(5, 140)
    few = torch.tensor([[1, 1, 9], [0, 2, 2], [7, 7, 7]])
    check_no_fallback(lambda x, s, i: x.scatter(1, i, s), x, torch.randn(3, 4), few, grad=False)
    many = torch.randint(0, 140, (4, 30), generator=torch.Generator().manual_seed(0))
    many[:, 5] = many[:, 2]
    check_no_fallback(lambda x, s, i: x.scatter(1, i, s), x, torch.randn(4, 30), many, grad=False)
    check_no_fallback(lambda x, s, i: x.scatter(0, i, s), torch.randn(12, 3, 4), torch.randn(20, 2, 4),
                      torch.randint(0, 12, (20, 2, 4), generator=torch.Generator().manual_seed(1)),
                      grad=False)


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_scatter_add_any_axis_bf16(dim):
    x = torch.randn(4, 130, 6).to(torch.bfloat16)
    idx = torch.randint(0, x.shape[dim], (4, 130, 6), generator=torch.Generator().manual_seed(2))
    check_no_fallback(lambda x, i, s: x.scatter_add(dim, i, s), x, idx,
                      torch.randn(4, 130, 6).to(torch.bfloat16), grad=False)


@pytest.mark.parametrize("dim, xshape, small, big", [
    (-1, (2, 4, 40, 16), (1, 1, 40, 50), (2, 4, 40, 50)),    # one distance table for every row and head
    (1, (3, 16, 5, 4), (1, 30, 5, 1), (3, 30, 5, 4)),        # scattered axis in the middle, two shared
    (0, (16, 6, 7), (40, 6, 1), (40, 6, 7)),                 # leading axis, no unshared dim but 6
])
def test_scatter_add_broadcast_index_is_a_onehot_matmul(dim, xshape, small, big, monkeypatch):
    """An index broadcast over some dims (stride 0), too wide for the compare: the one-hot of its
    distinct part times ``src`` (a batched matmul), repeated indices adding up; no host fallback."""
    import neuron_inductor.graph.decompositions_gather as dg
    monkeypatch.setattr(dg, "COMPARE_LIMIT", 64)  # the shapes stay small; the path is the wide one
    gen = torch.Generator().manual_seed(3)
    x, src = torch.randn(*xshape, generator=gen), torch.randn(*big, generator=gen)
    idx = torch.randint(0, xshape[dim], small, generator=gen)

    def fn(x, i, s):
        return x.scatter_add(dim, i.expand(*big), s)
    gm = make_fx(fn, decomposition_table=decomposition_table())(x, idx, src)
    targets = {n.target for n in gm.graph.nodes}
    assert torch.ops.aten.scatter_add.default not in targets
    assert torch.ops.aten.bmm.default in targets
    torch.testing.assert_close(gm(x, idx, src), fn(x, idx, src), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gm(x, idx.to(torch.int32), src), fn(x, idx, src), rtol=1e-5, atol=1e-5)


def test_relative_bias_gather_backward_runs_on_device():
    """A relative-position bias: per-head logits over distances gathered with one clamped distance
    table broadcast over batch and heads. Its backward, a scatter_add of 2x4x64x128 index elements
    into 64 distances (4x the compare limit), is a one-hot matmul, not a host fallback."""
    gen = torch.Generator().manual_seed(4)
    rel = torch.randn(2, 4, 64, 64, generator=gen)
    pos = torch.arange(64)
    dist = (pos[:, None] - torch.arange(128)[None, :] + 64).clamp(0, 63)

    def fn(rel, d):
        return rel.gather(-1, d.expand(2, 4, -1, -1)).sin()
    check_no_fallback(fn, rel, dist)
