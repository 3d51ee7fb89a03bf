"""Patch-embedding convolutions (stride == kernel) compile to matmuls, forward and backward."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from neuron_inductor import stats
from _compare import check


@pytest.mark.parametrize("shape,kernel,bias", [
    ((2, 3, 32, 32), (8, 8), True),     # ViT-style: 16 patches per image
    ((1, 4, 18, 21), (4, 5), False),    # partial last patches are dropped, as conv2d does
    ((3, 2, 6, 6), (2, 2), True),
])
def test_patchify_conv_matches_eager_with_no_fallback(shape, kernel, bias):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g)
    w = torch.randn(7, shape[1], *kernel, generator=g)
    b = torch.randn(7, generator=g) if bias else None
    stats.reset("compile", "fallback_ops")
    check(lambda x, w, b: F.conv2d(x, w, b, stride=kernel), x, w, b, grad=True, fallback="error",
          atol=1e-4, rtol=1e-5)
    assert not stats.fallback_ops()


def test_transposed_convolutions_are_a_declared_fallback():
    """A transposed conv is neither a patch embedding nor an im2col matmul: an (eager) declared
    fallback. (Padded and strided ungrouped convs are test_conv_im2col.py, grouped, depthwise and
    1-D ones test_conv_grouped.py.)"""
    x, w = torch.randn(1, 4, 5, 5), torch.randn(4, 2, 3, 3)
    stats.reset("compile", "fallback_ops")
    check(lambda x, w: F.conv_transpose2d(x, w, padding=1), x, w)
    assert stats.fallback_ops()["aten.convolution.default"] == 1
