"""General ungrouped 2-D convolutions as im2col matmuls (forward and backward decompositions).

A convolution with kernel ``kh x kw``, stride, padding and dilation reads, for each output pixel,
``kh * kw`` shifted (and strided) windows of the zero-padded image. Stacking those windows gives the
rows ``[B * Ho * Wo, C * kh * kw]`` (im2col); the output is one matmul of the rows with the weight
viewed as ``[O, C * kh * kw]``, which TensorE runs like any linear layer. The image is padded
in NHWC layout (one copy), the windows are a strided view of it (``as_strided``), and one more copy lays
out the rows, moving contiguous runs of ``kw * C`` elements. The rows take ``kh * kw`` times the
input's memory, the price of one large matmul instead of ``kh * kw`` small ones (and of a handful of
kernels per convolution, which keeps compile time low).

Backward:
- grad weight = rows^T @ grad_out (rows rebuilt from the saved input);
- grad input = a stride-1 convolution of grad_out, spread to stride ``s`` (zeros between pixels,
  built with ``slice_scatter`` into zeros) and padded by ``extent - 1 - padding``, with the weight's
  in/out channels swapped and its taps reversed (an exact matmul with an anti-identity) — the same im2col
  matmul again;
- grad bias = grad_out summed over batch and pixels.

Grouped, transposed and non-2-D convolutions, and padding wider than the kernel's extent, return
``NotImplemented`` (a declared fallback).
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def supported(x: torch.Tensor, weight: torch.Tensor, padding, dilation, transposed, groups) -> bool:
    """The cases these decompositions take (2-D, ungrouped, not transposed, padding < extent,
    non-empty: an empty batch is the empty-graph pass's or a fallback's)."""
    if x.dim() != 4 or weight.dim() != 4 or transposed or groups != 1:
        return False
    if not x.is_floating_point() or x.numel() == 0 or weight.numel() == 0:
        return False
    ext = [d * (k - 1) + 1 for d, k in zip(dilation, weight.shape[2:])]
    return all(0 <= p < e for p, e in zip(padding, ext))


def _out_size(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _nhwc_padded(x: torch.Tensor, ph: int, pw: int) -> torch.Tensor:
    """NCHW ``x`` -> contiguous NHWC with ``ph``/``pw`` zeros around H and W (one copy kernel)."""
    xh = aten.permute.default(x, [0, 2, 3, 1])
    if ph or pw:
        return aten.constant_pad_nd.default(xh, [0, 0, pw, pw, ph, ph], 0.0)
    return aten.clone.default(xh, memory_format=torch.contiguous_format)


def _rows(xp: torch.Tensor, kh: int, kw: int, stride, dilation, ho: int, wo: int) -> torch.Tensor:
    """``xp`` [B, Hp, Wp, C] (padded, contiguous NHWC) -> im2col rows [B*Ho*Wo, kh*kw*C], columns
    ordered (tap, channel). In NHWC a window row is one contiguous run of ``kw * C`` elements, so the
    copy that lays the rows out moves long runs. Undilated windows are one ``as_strided`` view of
    ``xp``; dilated ones are stacked tap by tap."""
    (sh, sw), (dh, dw) = stride, dilation
    b, c = xp.shape[0], xp.shape[3]
    if dh == 1 and dw == 1:
        hp, wp = xp.shape[1], xp.shape[2]
        cols = aten.as_strided.default(xp, [b, ho, wo, kh, kw, c],
                                       [hp * wp * c, sh * wp * c, sw * c, wp * c, c, 1])
    else:
        taps = []
        for i in range(kh):
            for j in range(kw):
                t = aten.slice.Tensor(xp, 1, i * dh, i * dh + (ho - 1) * sh + 1, sh)
                taps.append(aten.slice.Tensor(t, 2, j * dw, j * dw + (wo - 1) * sw + 1, sw))
        cols = aten.stack.default(taps, 3)  # [B, Ho, Wo, T, C]
    return aten.reshape.default(aten.clone.default(cols, memory_format=torch.contiguous_format),
                                [b * ho * wo, kh * kw * c])


def _weight_matrix(w: torch.Tensor) -> torch.Tensor:
    """[N, K, kh, kw] -> [N, kh*kw*K], columns ordered (tap, channel) like the rows."""
    n, k, kh, kw = w.shape
    wm = aten.clone.default(aten.permute.default(w, [0, 2, 3, 1]), memory_format=torch.contiguous_format)
    return aten.reshape.default(wm, [n, kh * kw * k])


def _reversed_taps(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` [O, C, kh, kw] with both spatial axes reversed (the input gradient's kernel).
    Reversing both axes reverses the flat tap index, so it is one exact matmul with the [T, T]
    anti-identity (products with 1 and sums with 0 round nothing)."""
    o, c, kh, kw = weight.shape
    t = kh * kw
    if t == 1:
        return weight
    iota = aten.arange.start_step(0, t, 1, dtype=torch.int64, device=weight.device)
    anti = aten.eq.Tensor(aten.view.default(iota, [t, 1]), aten.rsub.Scalar(iota, t - 1))
    anti = aten._to_copy.default(anti, dtype=weight.dtype)
    flipped = aten.mm.default(aten.reshape.default(weight, [o * c, t]), anti)
    return aten.reshape.default(flipped, [o, c, kh, kw])


def _matmul_conv(rows: torch.Tensor, wmat: torch.Tensor, b: int, ho: int, wo: int) -> torch.Tensor:
    """rows [B*Ho*Wo, K] @ wmat[N, K]^T -> NCHW output [B, N, Ho, Wo]."""
    out = aten.mm.default(rows, aten.permute.default(wmat, [1, 0]))
    out = aten.permute.default(aten.reshape.default(out, [b, ho, wo, wmat.shape[0]]), [0, 3, 1, 2])
    return aten.clone.default(out, memory_format=torch.contiguous_format)


def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if not supported(x, weight, padding, dilation, transposed, groups):
        return NotImplemented
    o, c, kh, kw = weight.shape
    b, _, h, w = x.shape
    ho = _out_size(h, kh, stride[0], padding[0], dilation[0])
    wo = _out_size(w, kw, stride[1], padding[1], dilation[1])
    rows = _rows(_nhwc_padded(x, padding[0], padding[1]), kh, kw, stride, dilation, ho, wo)
    out = _matmul_conv(rows, _weight_matrix(weight), b, ho, wo)
    if bias is not None:
        out = aten.add.Tensor(out, aten.reshape.default(bias, [1, o, 1, 1]))
    return out


def _spread(g: torch.Tensor, h: int, w: int, kh: int, kw: int, stride, padding, dilation) -> torch.Tensor:
    """grad_out [B, O, Ho, Wo] as NHWC, placed every ``stride`` pixels, offset by ``extent - 1 -
    padding``, in zeros of [B, H + eh - 1, W + ew - 1, O]: a stride-1 convolution of it with the
    reversed kernel is the input gradient."""
    b, o, ho, wo = g.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    eh, ew = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    lh, lw = eh - 1 - ph, ew - 1 - pw
    hp, wp = h + eh - 1, w + ew - 1
    gh = aten.permute.default(g, [0, 2, 3, 1])
    if sh == 1 and sw == 1:
        return aten.constant_pad_nd.default(gh, [0, 0, lw, wp - lw - wo, lh, hp - lh - ho], 0.0)
    strip = aten.full.default([b, ho, wp, o], 0.0, dtype=g.dtype, device=g.device)
    strip = aten.slice_scatter.default(strip, gh, 2, lw, lw + (wo - 1) * sw + 1, sw)
    full = aten.full.default([b, hp, wp, o], 0.0, dtype=g.dtype, device=g.device)
    return aten.slice_scatter.default(full, strip, 1, lh, lh + (ho - 1) * sh + 1, sh)


def convolution_backward(grad_out, x, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    if not supported(x, weight, padding, dilation, transposed, groups):
        return NotImplemented
    o, c, kh, kw = weight.shape
    b, _, h, w = x.shape
    ho, wo = grad_out.shape[2], grad_out.shape[3]
    grad_x = grad_w = grad_b = None
    if output_mask[0]:
        rows = _rows(_spread(grad_out, h, w, kh, kw, stride, padding, dilation), kh, kw, (1, 1),
                     dilation, h, w)
        wt = aten.permute.default(_reversed_taps(weight), [1, 0, 2, 3])  # [C, O, kh, kw]
        grad_x = _matmul_conv(rows, _weight_matrix(wt), b, h, w)
    if output_mask[1]:
        rows = _rows(_nhwc_padded(x, padding[0], padding[1]), kh, kw, stride, dilation, ho, wo)
        g = aten.reshape.default(aten.permute.default(grad_out, [0, 2, 3, 1]), [b * ho * wo, o])
        gw = aten.reshape.default(aten.mm.default(aten.permute.default(g, [1, 0]), rows), [o, kh, kw, c])
        grad_w = aten.clone.default(aten.permute.default(gw, [0, 3, 1, 2]),
                                    memory_format=torch.contiguous_format)
    if output_mask[2]:
        grad_b = aten.sum.dim_IntList(grad_out, [0, 2, 3])
    return grad_x, grad_w, grad_b
