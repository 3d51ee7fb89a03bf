"""Grouped and depthwise 2-D convolutions (forward and backward decompositions).

Depthwise (one input channel per group, ``weight`` [C * m, 1, kh, kw]: MobileNet blocks, ConvNeXt,
and the causal conv1d of linear-attention layers, lifted to 2-D by conv.py): each output channel
is ``kh * kw`` shifted (strided, dilated) windows of its own input channel, each times one weight,
summed. As a matmul its contraction would be ``kh * kw`` long, wasting TensorE; as shifted
multiply-adds it is ``kh * kw`` elementwise passes that fuse. The sum runs in fp32 (bf16 inputs are
widened first, the result rounded once, as eager's kernel does). Backward:
- grad input = the same shifted sum over the gradient spread to stride 1 and padded by
  ``extent - 1 - padding`` (conv_im2col's ``_spread``) with the taps taken in reverse order (no
  flip: each tap is a ``select``), then summed over the channel multiplier ``m``;
- grad weight: per tap, ``grad_out * window`` summed over batch and pixels;
- grad bias = grad_out summed over batch and pixels.

Grouped (``groups`` > 1 and more than one input channel per group: ResNeXt, some UNets): the im2col
rows of conv_im2col with their channel columns split by group, and one batched matmul with the
per-group weight matrices (a block-diagonal matmul without the zero blocks). Backward: grad weight
is the batched matmul of the per-group output gradients with the same rows; grad input is the same
grouped convolution of the spread gradient with each group's weight transposed and its taps
reversed (conv_im2col's anti-identity matmul, exact).

Transposed and non-2-D cases, padding wider than the kernel's extent, and empty inputs return
``NotImplemented`` (a declared fallback).
"""
from __future__ import annotations

import torch

from . import conv_im2col as im2col

aten = torch.ops.aten


def supported(x: torch.Tensor, weight: torch.Tensor, padding, dilation, transposed, groups) -> bool:
    """2-D, not transposed, ``groups`` > 1 splitting both channel axes evenly, padding < extent,
    floating point and non-empty."""
    if x.dim() != 4 or weight.dim() != 4 or transposed or groups <= 1:
        return False
    if x.shape[1] != groups * weight.shape[1] or weight.shape[0] % groups:
        return False
    if not x.is_floating_point() or x.numel() == 0 or weight.numel() == 0:
        return False
    ext = [d * (k - 1) + 1 for d, k in zip(dilation, weight.shape[2:])]
    return all(0 <= p < e for p, e in zip(padding, ext))


def _out_hw(x: torch.Tensor, weight: torch.Tensor, stride, padding, dilation) -> tuple[int, int]:
    return tuple(im2col._out_size(x.shape[2 + i], weight.shape[2 + i], stride[i], padding[i], dilation[i])
                 for i in range(2))


def _f32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.float32 else aten._to_copy.default(t, dtype=torch.float32)


def _window(xp: torch.Tensor, i: int, j: int, ho: int, wo: int, stride, dilation) -> torch.Tensor:
    """Tap (i, j)'s view of the padded NCHW ``xp``: rows ``i*dh + y*sh``, columns ``j*dw + x*sw``."""
    (sh, sw), (dh, dw) = stride, dilation
    t = aten.slice.Tensor(xp, 2, i * dh, i * dh + (ho - 1) * sh + 1, sh)
    return aten.slice.Tensor(t, 3, j * dw, j * dw + (wo - 1) * sw + 1, sw)


def _tap(w: torch.Tensor, i: int, j: int) -> torch.Tensor:
    """``w`` [O, 1, kh, kw] -> tap (i, j) as [1, O, 1, 1] (broadcast over batch and pixels)."""
    return aten.reshape.default(aten.select.int(aten.select.int(w, 3, j), 2, i), [1, w.shape[0], 1, 1])


def _shifted_sum(xp: torch.Tensor, w: torch.Tensor, ho: int, wo: int, stride, dilation,
                 reverse: bool = False) -> torch.Tensor:
    """sum over taps of window(tap) * w[:, 0, tap] (taps reversed with ``reverse``)."""
    kh, kw = w.shape[2], w.shape[3]
    acc = None
    for i in range(kh):
        for j in range(kw):
            wt = _tap(w, kh - 1 - i, kw - 1 - j) if reverse else _tap(w, i, j)
            term = aten.mul.Tensor(_window(xp, i, j, ho, wo, stride, dilation), wt)
            acc = term if acc is None else aten.add.Tensor(acc, term)
    return acc


def _per_output_channel(x: torch.Tensor, m: int) -> torch.Tensor:
    """[B, C, H, W] -> [B, C*m, H, W], input channel c repeated for its ``m`` output channels."""
    if m == 1:
        return x
    b, c, h, w = x.shape
    e = aten.expand.default(aten.unsqueeze.default(x, 2), [b, c, m, h, w])
    return aten.reshape.default(aten.clone.default(e, memory_format=torch.contiguous_format),
                                [b, c * m, h, w])


def _depthwise(x, weight, bias, stride, padding, dilation):
    o, c = weight.shape[0], x.shape[1]
    ho, wo = _out_hw(x, weight, stride, padding, dilation)
    (ph, pw) = padding
    xp = _per_output_channel(_f32(x), o // c)
    if ph or pw:
        xp = aten.constant_pad_nd.default(xp, [pw, pw, ph, ph], 0.0)
    out = _shifted_sum(xp, _f32(weight), ho, wo, stride, dilation)
    if bias is not None:
        out = aten.add.Tensor(out, aten.reshape.default(_f32(bias), [1, o, 1, 1]))
    return out if x.dtype == torch.float32 else aten._to_copy.default(out, dtype=x.dtype)


def _depthwise_backward(grad_out, x, weight, stride, padding, dilation, output_mask):
    o, _, kh, kw = weight.shape
    b, c, h, w = x.shape
    ho, wo = grad_out.shape[2], grad_out.shape[3]
    g = _f32(grad_out)
    grad_x = grad_w = grad_b = None
    if output_mask[0]:
        spread = aten.permute.default(im2col._spread(g, h, w, kh, kw, stride, padding, dilation),
                                      [0, 3, 1, 2])  # NCHW view of [B, H+eh-1, W+ew-1, O]
        gx = _shifted_sum(spread, _f32(weight), h, w, (1, 1), dilation, reverse=True)
        if o != c:
            gx = aten.sum.dim_IntList(aten.reshape.default(gx, [b, c, o // c, h, w]), [2])
        grad_x = gx if x.dtype == torch.float32 else aten._to_copy.default(gx, dtype=x.dtype)
    if output_mask[1]:
        xp = _per_output_channel(_f32(x), o // c)
        if padding[0] or padding[1]:
            xp = aten.constant_pad_nd.default(xp, [padding[1], padding[1], padding[0], padding[0]], 0.0)
        taps = [aten.sum.dim_IntList(aten.mul.Tensor(g, _window(xp, i, j, ho, wo, stride, dilation)),
                                     [0, 2, 3])
                for i in range(kh) for j in range(kw)]
        gw = aten.reshape.default(aten.stack.default(taps, 1), [o, 1, kh, kw])
        grad_w = gw if weight.dtype == torch.float32 else aten._to_copy.default(gw, dtype=weight.dtype)
    if output_mask[2]:
        gb = aten.sum.dim_IntList(g, [0, 2, 3])
        grad_b = gb if grad_out.dtype == torch.float32 else aten._to_copy.default(gb, dtype=grad_out.dtype)
    return grad_x, grad_w, grad_b


def _group_rows(rows: torch.Tensor, taps: int, groups: int) -> torch.Tensor:
    """im2col rows [N, T*C] (columns (tap, channel)) -> [G, N, T*Cg] (columns (tap, channel) of the
    group's channels)."""
    n, cg = rows.shape[0], rows.shape[1] // (taps * groups)
    r = aten.permute.default(aten.reshape.default(rows, [n, taps, groups, cg]), [2, 0, 1, 3])
    return aten.reshape.default(aten.clone.default(r, memory_format=torch.contiguous_format),
                                [groups, n, taps * cg])


def _group_weights(w: torch.Tensor, groups: int) -> torch.Tensor:
    """[O, Cg, kh, kw] -> [G, Og, kh*kw*Cg], columns (tap, channel) like the grouped rows."""
    o, cg, kh, kw = w.shape
    wg = aten.permute.default(aten.reshape.default(w, [groups, o // groups, cg, kh, kw]), [0, 1, 3, 4, 2])
    return aten.reshape.default(aten.clone.default(wg, memory_format=torch.contiguous_format),
                                [groups, o // groups, kh * kw * cg])


def _grouped_matmul_conv(rows: torch.Tensor, wmat: torch.Tensor, b: int, ho: int, wo: int) -> torch.Tensor:
    """rows [G, B*Ho*Wo, K] @ wmat [G, Og, K]^T -> NCHW [B, G*Og, Ho, Wo]."""
    g, og = wmat.shape[0], wmat.shape[1]
    out = aten.bmm.default(rows, aten.permute.default(wmat, [0, 2, 1]))  # [G, N, Og]
    out = aten.reshape.default(out, [g, b, ho, wo, og])
    out = aten.permute.default(out, [1, 0, 4, 2, 3])  # [B, G, Og, Ho, Wo]
    return aten.reshape.default(aten.clone.default(out, memory_format=torch.contiguous_format),
                                [b, g * og, ho, wo])


def _grouped(x, weight, bias, stride, padding, dilation, groups):
    o, _, kh, kw = weight.shape
    b = x.shape[0]
    ho, wo = _out_hw(x, weight, stride, padding, dilation)
    rows = im2col._rows(im2col._nhwc_padded(x, padding[0], padding[1]), kh, kw, stride, dilation, ho, wo)
    out = _grouped_matmul_conv(_group_rows(rows, kh * kw, groups), _group_weights(weight, groups), b, ho, wo)
    if bias is not None:
        out = aten.add.Tensor(out, aten.reshape.default(bias, [1, o, 1, 1]))
    return out


def _grouped_backward(grad_out, x, weight, stride, padding, dilation, groups, output_mask):
    o, cg, kh, kw = weight.shape
    b, c, h, w = x.shape
    ho, wo = grad_out.shape[2], grad_out.shape[3]
    og = o // groups
    grad_x = grad_w = grad_b = None
    if output_mask[0]:
        rows = im2col._rows(im2col._spread(grad_out, h, w, kh, kw, stride, padding, dilation), kh, kw,
                            (1, 1), dilation, h, w)
        # each group's weight [Og, Cg, kh, kw] transposed to [Cg, Og, kh, kw], taps reversed
        wr = aten.reshape.default(im2col._reversed_taps(weight), [groups, og, cg, kh, kw])
        wt = aten.reshape.default(aten.permute.default(wr, [0, 2, 1, 3, 4]), [groups * cg, og, kh, kw])
        grad_x = _grouped_matmul_conv(_group_rows(rows, kh * kw, groups), _group_weights(wt, groups), b, h, w)
    if output_mask[1]:
        rows = im2col._rows(im2col._nhwc_padded(x, padding[0], padding[1]), kh, kw, stride, dilation, ho, wo)
        gr = _group_rows(rows, kh * kw, groups)  # [G, N, T*Cg]
        g = aten.reshape.default(aten.permute.default(grad_out, [1, 0, 2, 3]), [groups, og, b * ho * wo])
        gw = aten.reshape.default(aten.bmm.default(g, gr), [o, kh, kw, cg])
        grad_w = aten.clone.default(aten.permute.default(gw, [0, 3, 1, 2]), memory_format=torch.contiguous_format)
    if output_mask[2]:
        grad_b = aten.sum.dim_IntList(grad_out, [0, 2, 3])
    return grad_x, grad_w, grad_b


def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if not supported(x, weight, padding, dilation, transposed, groups):
        return NotImplemented
    if weight.shape[1] == 1:
        return _depthwise(x, weight, bias, stride, padding, dilation)
    return _grouped(x, weight, bias, stride, padding, dilation, groups)


def convolution_backward(grad_out, x, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    if not supported(x, weight, padding, dilation, transposed, groups):
        return NotImplemented
    if weight.shape[1] == 1:
        return _depthwise_backward(grad_out, x, weight, stride, padding, dilation, output_mask)
    return _grouped_backward(grad_out, x, weight, stride, padding, dilation, groups, output_mask)
