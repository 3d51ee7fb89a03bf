"""Grouped, depthwise and 1-D convolutions compile without fallback, forward and backward, fp32 and bf16.

bf16: the depthwise sums run in fp32 and round once, where eager's bf16 kernels round partial
sums (its input gradient is measurably further from fp64 math), so bf16 cases use ``check_cases``:
equal to eager within bf16 tolerance, or no further from fp32 math than eager is.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from neuron_inductor import stats
from _compare import check

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lowering"))
from _ops import check_cases  # noqa: E402


def _inputs(shape, out_ch, groups, kernel, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    fan_in = shape[1] // groups * torch.Size(kernel).numel()
    w = torch.randn(out_ch, shape[1] // groups, *kernel, generator=g) / fan_in ** 0.5
    b = torch.randn(out_ch, generator=g)
    return x.to(dtype), w.to(dtype), b.to(dtype)


@pytest.mark.parametrize("shape,out_ch,groups,kernel,stride,padding,dilation", [
    ((2, 6, 7, 9), 6, 6, (3, 3), 1, 1, 1),          # depthwise, ragged sizes
    ((1, 4, 9, 8), 8, 4, (3, 3), 2, 1, 1),          # depthwise, multiplier 2, stride 2
    ((1, 3, 9, 9), 3, 3, (3, 2), (1, 2), (2, 1), 2),  # depthwise, rectangular, dilated
    ((1, 130, 5, 6), 130, 130, (7, 7), 1, 3, 1),    # ConvNeXt-style 7x7 depthwise, channels over one tile
    ((2, 8, 6, 7), 12, 4, (3, 3), 1, 1, 1),         # grouped: 2 in / 3 out channels per group
    ((1, 6, 9, 7), 4, 2, (3, 3), 2, 1, 1),          # grouped, stride 2
    ((1, 4, 8, 8), 6, 2, (2, 3), 1, (1, 0), (2, 1)),  # grouped, rectangular, dilated
    ((1, 64, 5, 5), 64, 2, (3, 3), 1, 1, 1),        # grouped: contraction 288 > 128 rows
])
def test_grouped_conv2d_matches_eager_with_no_fallback(shape, out_ch, groups, kernel, stride, padding,
                                                        dilation):
    x, w, b = _inputs(shape, out_ch, groups, kernel)
    stats.reset()
    check(lambda x, w, b: F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation,
                                   groups=groups), x, w, b, grad=True, fallback="error", atol=1e-4, rtol=1e-4)
    assert not stats.fallback_ops()


@pytest.mark.parametrize("shape,out_ch,groups,kernel,stride,padding,dilation", [
    ((2, 10, 13), 10, 10, 4, 1, 3, 1),     # the causal conv1d of linear-attention layers (then sliced)
    ((1, 6, 11), 12, 6, 3, 2, 1, 2),       # depthwise, multiplier 2, strided, dilated
    ((2, 6, 9), 4, 2, 3, 1, 1, 1),         # grouped
    ((2, 3, 10), 5, 1, 3, 2, 1, 1),        # ungrouped 1-D (im2col over a height-1 image)
    ((1, 4, 12), 6, 1, 4, 4, 0, 1),        # ungrouped, stride == kernel
])
def test_conv1d_matches_eager_with_no_fallback(shape, out_ch, groups, kernel, stride, padding, dilation):
    x, w, b = _inputs(shape, out_ch, groups, (kernel,))
    stats.reset()
    check(lambda x, w, b: F.conv1d(x, w, b, stride=stride, padding=padding, dilation=dilation,
                                   groups=groups), x, w, b, grad=True, fallback="error", atol=1e-4, rtol=1e-4)
    assert not stats.fallback_ops()


def test_causal_depthwise_conv1d_as_qwen3_5_calls_it():
    """``F.conv1d(x, w.unsqueeze(1), bias, padding=k-1, groups=C)[..., :L]`` then SiLU, over more
    than one 128-row tile of channels."""
    x, w, b = _inputs((2, 200, 37), 200, 200, (4,), seed=3)

    def fn(x, w, b):
        return F.silu(F.conv1d(x, w, b, padding=3, groups=200)[:, :, :37])
    stats.reset()
    check(fn, x, w, b, grad=True, fallback="error", atol=1e-4, rtol=1e-4)
    assert not stats.fallback_ops()


def test_grouped_and_depthwise_bf16():
    cases = [(*_inputs((2, 8, 6, 7), o, g, (3, 3), dtype=torch.bfloat16, seed=1), g)
             for g, o in ((8, 8), (4, 8), (8, 16))]
    check_cases(lambda x, w, b, g: F.conv2d(x, w, b, padding=1, groups=g), cases, grad=True)


def test_depthwise_conv1d_bf16():
    cases = [_inputs((2, 16, 21), 16, 16, (4,), dtype=torch.bfloat16, seed=2),
             _inputs((1, 130, 9), 130, 130, (4,), dtype=torch.bfloat16, seed=5)]
    check_cases(lambda x, w, b: F.conv1d(x, w, b, padding=3, groups=x.shape[1])[:, :, :x.shape[2]],
                cases, grad=True)


def test_input_gradient_alone_for_a_frozen_depthwise_weight():
    x, w, _ = _inputs((1, 4, 6, 6), 4, 4, (3, 3), seed=4)
    stats.reset()
    check(lambda x: F.conv2d(x, w, stride=2, padding=1, groups=4), x, grad=True, fallback="error",
          atol=1e-4, rtol=1e-4)
    assert not stats.fallback_ops()


def test_transposed_conv_stays_a_declared_fallback():
    x, w = torch.randn(1, 4, 5), torch.randn(4, 2, 3)
    stats.reset()
    check(lambda x, w: F.conv_transpose1d(x, w, padding=1), x, w)
    assert stats.fallback_ops()["aten.convolution.default"] == 1
