"""gather / scatter_add decompositions (graph/decompositions_gather.py): every legal index shape,
forward and backward against eager, with no op left to a host fallback."""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import neuron_inductor.compile as nc
from neuron_inductor.graph.decompositions import decomposition_table
from tests._compare import check


def check_no_fallback(fn, *args, grad: bool = True):
    nc.reset_counters()
    check(fn, *args, grad=grad)
    assert not nc.fallback_ops, dict(nc.fallback_ops)


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
