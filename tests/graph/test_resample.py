"""Nearest upsampling compiles to index_select gathers and its backward to one-hot matmuls."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from neuron_inductor import stats
from _compare import check


@pytest.mark.parametrize("shape,kwargs", [
    ((2, 3, 4, 4), dict(scale_factor=2.0)),                  # a UNet upsampler
    ((1, 2, 3, 5), dict(scale_factor=(3.0, 2.0))),
    ((1, 2, 6, 6), dict(size=(4, 9))),                       # down on one axis: rows are skipped
    ((1, 2, 70, 3), dict(scale_factor=2.0)),                 # 140 output rows: > 128 partitions
    ((2, 4, 7), dict(scale_factor=2.0)),                     # 1-D
])
def test_nearest_upsampling_matches_eager_with_no_fallback(shape, kwargs):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    stats.reset("compile", "fallback_ops")
    check(lambda x: F.interpolate(x, mode="nearest", **kwargs), x, grad=True, fallback="error")
    assert not stats.fallback_ops()


def test_nearest_upsampling_bf16():
    x = torch.randn(1, 3, 5, 4, generator=torch.Generator().manual_seed(1)).bfloat16()
    stats.reset("compile", "fallback_ops")
    check(lambda x: F.interpolate(x, scale_factor=2.0, mode="nearest"), x, grad=True, fallback="error")
    assert not stats.fallback_ops()


def test_non_separable_index_keeps_its_meaning():
    """A gather whose indices are not an outer product (both index tensors span the same axis) is
    left to ``index``/``index_put``: same numbers as eager."""
    ih = torch.tensor([[0, 2], [1, 1]])
    iw = torch.tensor([[1, 0], [2, 2]])
    x = torch.randn(2, 3, 3, 3)
    check(lambda x: torch.ops.aten._unsafe_index(x, [None, None, ih, iw]), x)
