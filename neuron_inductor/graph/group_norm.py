"""Group norm in ATen ops we lower (forward; the backward is torch's core decomposition).

``native_group_norm`` is a core ATen op, so torch's tables keep it whole and it would run on the host.
As with layer norm (decompositions.py), it becomes a per-(sample, group) mean and variance — two
free-axis reductions over ``C / G * H * W`` elements — computed in fp32 whatever the input dtype,
then pointwise normalisation and the per-channel affine. Outputs match torch's: the normalised
tensor and ``mean``/``rstd`` of shape [N, G] (saved for the backward).
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def native_group_norm(x: torch.Tensor, weight, bias, n: int, c: int, hxw: int, group: int, eps: float):
    if not x.is_floating_point() or x.numel() == 0 or c % group:
        return NotImplemented
    xf = aten._to_copy.default(x, dtype=torch.float32) if x.dtype != torch.float32 else x
    grouped = aten.reshape.default(xf, [n, group, (c // group) * hxw])
    mean = aten.mean.dim(grouped, [2], True)
    diff = aten.sub.Tensor(grouped, mean)
    var = aten.div.Scalar(aten.sum.dim_IntList(aten.mul.Tensor(diff, diff), [2], True),
                          (c // group) * hxw)
    rstd = aten.rsqrt.default(aten.add.Scalar(var, eps))
    out = aten.reshape.default(aten.mul.Tensor(diff, rstd), [n, c, hxw])
    if weight is not None:
        out = aten.mul.Tensor(out, aten.reshape.default(weight, [1, c, 1]))
    if bias is not None:
        out = aten.add.Tensor(out, aten.reshape.default(bias, [1, c, 1]))
    out = aten.reshape.default(out, list(x.shape))
    mean, rstd = aten.reshape.default(mean, [n, group]), aten.reshape.default(rstd, [n, group])
    if x.dtype != torch.float32:
        out, mean, rstd = (aten._to_copy.default(t, dtype=x.dtype) for t in (out, mean, rstd))
    return out, mean, rstd


DECOMPOSITIONS = {aten.native_group_norm.default: native_group_norm}
