"""2-D convolutions as matmuls (forward and backward decompositions).

A 2-D convolution whose stride equals its kernel size, with no padding, dilation or groups — the
patch embedding of every vision transformer (ViT, DeiT, CLIP, DiT) and every 1x1 convolution — reads
each input pixel once: it is a reshape of the image into patch rows ``[B * Ho * Wo, C * kh * kw]`` and
one matmul with the weight viewed as ``[O, C * kh * kw]``, which TensorE runs as any linear layer.
The backward is the same two views and two matmuls.

Any other ungrouped 2-D convolution (the 3x3, padding 1, stride 1 or 2 convolutions of a diffusion
UNet) is an im2col matmul (conv_im2col.py); grouped and depthwise ones are conv_grouped.py. A 1-D
convolution is the 2-D one over a height-1 image (kernel ``1 x k``). Transposed convolutions are
left alone (``NotImplemented``: a declared fallback).
"""
from __future__ import annotations

import torch

from . import conv_grouped as grouped
from . import conv_im2col as im2col

aten = torch.ops.aten


def _patchify(stride, padding, dilation, transposed, output_padding, groups, kernel) -> bool:
    return (not transposed and groups == 1 and len(kernel) == 2 and list(stride) == list(kernel)
            and all(p == 0 for p in padding) and all(d == 1 for d in dilation)
            and all(p == 0 for p in (output_padding or [0])))


def _patch_rows(x: torch.Tensor, kh: int, kw: int) -> tuple[torch.Tensor, int, int]:
    """``x`` [B, C, H, W] -> rows [B*Ho*Wo, C*kh*kw] (a partial last patch is dropped, as conv does)."""
    b, c, h, w = x.shape
    ho, wo = h // kh, w // kw
    if ho * kh != h:
        x = aten.slice.Tensor(x, 2, 0, ho * kh)
    if wo * kw != w:
        x = aten.slice.Tensor(x, 3, 0, wo * kw)
    x = aten.reshape.default(x, [b, c, ho, kh, wo, kw])
    x = aten.permute.default(x, [0, 2, 4, 1, 3, 5])
    return aten.reshape.default(aten.clone.default(x, memory_format=torch.contiguous_format),
                                [b * ho * wo, c * kh * kw]), ho, wo


def _is_1d(x: torch.Tensor, weight: torch.Tensor, stride, padding, dilation) -> bool:
    return x.dim() == 3 and weight.dim() == 3 and all(len(a) == 1 for a in (stride, padding, dilation))


def _as_2d(stride, padding, dilation) -> tuple[list[int], list[int], list[int]]:
    """1-D conv parameters for the same conv on a [B, C, 1, L] image with a [O, Cg, 1, k] kernel."""
    return [1, stride[0]], [0, padding[0]], [1, dilation[0]]


def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if _is_1d(x, weight, stride, padding, dilation) and not transposed:
        out = convolution(aten.unsqueeze.default(x, 2), aten.unsqueeze.default(weight, 2), bias,
                          *_as_2d(stride, padding, dilation), transposed, [0, 0], groups)
        return out if out is NotImplemented else aten.squeeze.dim(out, 2)
    if groups != 1:
        return grouped.convolution(x, weight, bias, stride, padding, dilation, transposed,
                                   output_padding, groups)
    if x.dim() != 4 or not _patchify(stride, padding, dilation, transposed, output_padding, groups,
                                     weight.shape[2:]):
        return im2col.convolution(x, weight, bias, stride, padding, dilation, transposed,
                                  output_padding, groups)
    o, _, kh, kw = weight.shape
    rows, ho, wo = _patch_rows(x, kh, kw)
    out = aten.mm.default(rows, aten.permute.default(aten.reshape.default(weight, [o, -1]), [1, 0]))
    if bias is not None:
        out = aten.add.Tensor(out, bias)
    out = aten.permute.default(aten.reshape.default(out, [x.shape[0], ho, wo, o]), [0, 3, 1, 2])
    return aten.clone.default(out, memory_format=torch.contiguous_format)


def convolution_backward(grad_out, x, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    if _is_1d(x, weight, stride, padding, dilation) and not transposed:
        grads = convolution_backward(aten.unsqueeze.default(grad_out, 2), aten.unsqueeze.default(x, 2),
                                     aten.unsqueeze.default(weight, 2), bias_sizes,
                                     *_as_2d(stride, padding, dilation), transposed, [0, 0], groups,
                                     output_mask)
        if grads is NotImplemented:
            return grads
        gx, gw, gb = grads
        return (None if gx is None else aten.squeeze.dim(gx, 2),
                None if gw is None else aten.squeeze.dim(gw, 2), gb)
    if groups != 1:
        return grouped.convolution_backward(grad_out, x, weight, bias_sizes, stride, padding, dilation,
                                            transposed, output_padding, groups, output_mask)
    if x.dim() != 4 or not _patchify(stride, padding, dilation, transposed, output_padding, groups,
                                     weight.shape[2:]):
        return im2col.convolution_backward(grad_out, x, weight, bias_sizes, stride, padding, dilation,
                                           transposed, output_padding, groups, output_mask)
    o, c, kh, kw = weight.shape
    b, _, h, w = x.shape
    ho, wo = grad_out.shape[2], grad_out.shape[3]
    g = aten.reshape.default(aten.permute.default(grad_out, [0, 2, 3, 1]), [b * ho * wo, o])
    grad_x = grad_w = grad_b = None
    if output_mask[0]:
        cols = aten.mm.default(g, aten.reshape.default(weight, [o, c * kh * kw]))
        cols = aten.permute.default(aten.reshape.default(cols, [b, ho, wo, c, kh, kw]), [0, 3, 1, 4, 2, 5])
        grad_x = aten.reshape.default(aten.clone.default(cols, memory_format=torch.contiguous_format),
                                      [b, c, ho * kh, wo * kw])
        if ho * kh != h or wo * kw != w:
            grad_x = aten.constant_pad_nd.default(grad_x, [0, w - wo * kw, 0, h - ho * kh], 0.0)
    if output_mask[1]:
        rows, _, _ = _patch_rows(x, kh, kw)
        grad_w = aten.reshape.default(aten.mm.default(aten.permute.default(g, [1, 0]), rows),
                                      [o, c, kh, kw])
    if output_mask[2]:
        grad_b = aten.sum.dim_IntList(g, [0])
    return grad_x, grad_w, grad_b


DECOMPOSITIONS = {
    aten.convolution.default: convolution,
    aten.convolution_backward.default: convolution_backward,
}
