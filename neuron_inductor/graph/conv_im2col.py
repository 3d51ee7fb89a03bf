"""General ungrouped 2-D convolutions as im2col matmuls (forward and backward decompositions).

A convolution with kernel ``kh x kw``, stride, padding and dilation reads, for each output pixel,
``kh * kw`` shifted (and strided) windows of the zero-padded image. Stacking those windows gives the
rows ``[B * Ho * Wo, C * kh * kw]`` (im2col); the output is one matmul of the rows with the weight
viewed as ``[O, C * kh * kw]``, which TensorE runs like any linear layer. The windows are strided
slices of the padded image (views), so the only copies are the pad, the stack and the row layout:
the rows take ``kh * kw`` times the input's memory, the price of one large matmul instead of
``kh * kw`` small ones.

Backward:
- grad weight = rows^T @ grad_out (rows rebuilt from the saved input);
- grad input = a stride-1 convolution of grad_out, spread to stride ``s`` (zeros between pixels,
  built with ``slice_scatter`` into zeros) and padded by ``extent - 1 - padding``, with the weight's
  in/out channels swapped and its taps reversed — the same im2col matmul again;
- grad bias = grad_out summed over batch and pixels.

Grouped, transposed and non-2-D convolutions, and padding wider than the kernel's extent, return
``NotImplemented`` (a declared fallback).
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def supported(x: torch.Tensor, weight: torch.Tensor, padding, dilation, transposed, groups) -> bool:
    """The cases these decompositions take (2-D, ungrouped, not transposed, padding < extent)."""
    if x.dim() != 4 or weight.dim() != 4 or transposed or groups != 1:
        return False
    if not x.is_floating_point():
        return False
    ext = [d * (k - 1) + 1 for d, k in zip(dilation, weight.shape[2:])]
    return all(0 <= p < e for p, e in zip(padding, ext))


def _out_size(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _rows(xp: torch.Tensor, kh: int, kw: int, stride, dilation, ho: int, wo: int,
          reverse: bool = False) -> torch.Tensor:
    """``xp`` [B, C, Hp, Wp] (already padded) -> im2col rows [B*Ho*Wo, C*kh*kw], columns ordered
    (channel, tap) like ``weight.reshape(O, -1)``; ``reverse`` reads the taps back to front (the
    flipped kernel of the input gradient)."""
    (sh, sw), (dh, dw) = stride, dilation
    b, c = xp.shape[0], xp.shape[1]
    taps = []
    for i in range(kh):
        for j in range(kw):
            a, e = ((kh - 1 - i) * dh, (kw - 1 - j) * dw) if reverse else (i * dh, j * dw)
            t = aten.slice.Tensor(xp, 2, a, a + (ho - 1) * sh + 1, sh)
            taps.append(aten.slice.Tensor(t, 3, e, e + (wo - 1) * sw + 1, sw))
    cols = aten.stack.default(taps, 2) if len(taps) > 1 else aten.unsqueeze.default(taps[0], 2)
    cols = aten.permute.default(cols, [0, 3, 4, 1, 2])  # [B, Ho, Wo, C, T]
    return aten.reshape.default(aten.clone.default(cols, memory_format=torch.contiguous_format),
                                [b * ho * wo, c * kh * kw])


def _matmul_conv(rows: torch.Tensor, wmat: torch.Tensor, b: int, ho: int, wo: int) -> torch.Tensor:
    """rows [B*Ho*Wo, K] @ wmat[N, K]^T -> NCHW output [B, N, Ho, Wo]."""
    out = aten.mm.default(rows, aten.permute.default(wmat, [1, 0]))
    out = aten.permute.default(aten.reshape.default(out, [b, ho, wo, wmat.shape[0]]), [0, 3, 1, 2])
    return aten.clone.default(out, memory_format=torch.contiguous_format)


def _pad(x: torch.Tensor, ph: int, pw: int) -> torch.Tensor:
    return aten.constant_pad_nd.default(x, [pw, pw, ph, ph], 0.0) if ph or pw else x


def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if not supported(x, weight, padding, dilation, transposed, groups):
        return NotImplemented
    o, c, kh, kw = weight.shape
    b, _, h, w = x.shape
    ho = _out_size(h, kh, stride[0], padding[0], dilation[0])
    wo = _out_size(w, kw, stride[1], padding[1], dilation[1])
    rows = _rows(_pad(x, padding[0], padding[1]), kh, kw, stride, dilation, ho, wo)
    out = _matmul_conv(rows, aten.reshape.default(weight, [o, c * kh * kw]), b, ho, wo)
    if bias is not None:
        out = aten.add.Tensor(out, aten.reshape.default(bias, [1, o, 1, 1]))
    return out


def _spread(g: torch.Tensor, h: int, w: int, kh: int, kw: int, stride, padding, dilation) -> torch.Tensor:
    """grad_out [B, O, Ho, Wo] placed every ``stride`` pixels, offset by ``extent - 1 - padding``,
    in zeros of [B, O, H + eh - 1, W + ew - 1]: a stride-1 convolution of it with the reversed
    kernel is the input gradient."""
    b, o, ho, wo = g.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    eh, ew = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    lh, lw = eh - 1 - ph, ew - 1 - pw
    hp, wp = h + eh - 1, w + ew - 1
    if sh == 1 and sw == 1:
        return aten.constant_pad_nd.default(g, [lw, wp - lw - wo, lh, hp - lh - ho], 0.0)
    rowsp = aten.full.default([b, o, ho, wp], 0.0, dtype=g.dtype, device=g.device)
    rowsp = aten.slice_scatter.default(rowsp, g, 3, lw, lw + (wo - 1) * sw + 1, sw)
    full = aten.full.default([b, o, hp, wp], 0.0, dtype=g.dtype, device=g.device)
    return aten.slice_scatter.default(full, rowsp, 2, lh, lh + (ho - 1) * sh + 1, sh)


def convolution_backward(grad_out, x, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    if not supported(x, weight, padding, dilation, transposed, groups):
        return NotImplemented
    o, c, kh, kw = weight.shape
    b, _, h, w = x.shape
    ho, wo = grad_out.shape[2], grad_out.shape[3]
    grad_x = grad_w = grad_b = None
    if output_mask[0]:
        spread = _spread(grad_out, h, w, kh, kw, stride, padding, dilation)
        rows = _rows(spread, kh, kw, (1, 1), dilation, h, w, reverse=True)
        wt = aten.reshape.default(aten.permute.default(weight, [1, 0, 2, 3]), [c, o * kh * kw])
        grad_x = _matmul_conv(rows, wt, b, h, w)
    if output_mask[1]:
        rows = _rows(_pad(x, padding[0], padding[1]), kh, kw, stride, dilation, ho, wo)
        g = aten.reshape.default(aten.permute.default(grad_out, [0, 2, 3, 1]), [b * ho * wo, o])
        grad_w = aten.reshape.default(aten.mm.default(aten.permute.default(g, [1, 0]), rows),
                                      [o, c, kh, kw])
    if output_mask[2]:
        grad_b = aten.sum.dim_IntList(grad_out, [0, 2, 3])
    return grad_x, grad_w, grad_b
