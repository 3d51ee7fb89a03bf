"""Group norm compiles to reductions and pointwise kernels, forward and backward, fp32 and bf16."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from neuron_inductor import stats
from _compare import check


@pytest.mark.parametrize("shape,groups,affine", [
    ((2, 32, 8, 8), 8, True),      # a UNet resnet block's norm
    ((3, 6, 5, 7), 3, True),       # ragged spatial size
    ((1, 4, 200), 2, False),       # 1-D (sequence) input, 400 elements per group: free-axis tiling
    ((2, 8, 3, 3), 8, True),       # one channel per group (instance norm)
])
def test_group_norm_matches_eager_with_no_fallback(shape, groups, affine):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g) * 3 + 1
    w = torch.randn(shape[1], generator=g) if affine else None
    b = torch.randn(shape[1], generator=g) if affine else None
    stats.reset("compile", "fallback_ops")
    check(lambda x, w, b: F.group_norm(x, groups, w, b, eps=1e-6), x, w, b, grad=True,
          fallback="error", atol=1e-4, rtol=1e-4)
    assert not stats.fallback_ops()


def test_group_norm_bf16():
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(2, 16, 4, 4, generator=g) * 2).bfloat16()
    w, b = torch.randn(16, generator=g).bfloat16(), torch.randn(16, generator=g).bfloat16()
    stats.reset("compile", "fallback_ops")
    check(lambda x, w, b: F.group_norm(x, 4, w, b), x, w, b, grad=True, fallback="error")
    assert not stats.fallback_ops()


def test_group_norm_inference_graph_is_lowered():
    """Under no_grad the forward is an inference graph (no saved mean/rstd): still no fallback."""
    m = torch.nn.GroupNorm(4, 8)
    x = torch.randn(2, 8, 5, 5)
    stats.reset("compile", "fallback_ops")
    with torch.no_grad():
        check(m, x, fallback="error", atol=1e-5, rtol=1e-4)
    assert not stats.fallback_ops()
