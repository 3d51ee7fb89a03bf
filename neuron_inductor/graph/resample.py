"""Nearest (and any separable) resampling gathers as index_selects; their backward as matmuls.

``F.interpolate(mode="nearest")`` reaches the compiler already decomposed (torch does it above
autograd) into ``_unsafe_index(x, [None, None, ih[:, None], iw])`` with computed source rows ``ih``
and columns ``iw``: an outer-product gather on the trailing axes, whose index values are unknown while
tracing. Because each index varies along its own axis only, the gather is one ``index_select`` per
indexed axis (an indirect DMA gather each), and its backward, ``_unsafe_index_put(zeros, ...,
accumulate=True)``, is one one-hot matmul per axis (decompositions_gather.index_put_accumulate, where
duplicate sources add up on TensorE). Index patterns that are not separable keep torch's meaning
through ``index`` / ``index_put``.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _separable(x: torch.Tensor, indices) -> tuple[int, list] | None:
    """(k, flat indices) when ``indices`` are k leading ``None`` then m integer tensors, index j
    varying only along broadcast axis j of m (an outer product); else None."""
    if not indices:
        return None
    k = 0
    while k < len(indices) and indices[k] is None:
        k += 1
    idx = list(indices[k:])
    m = len(idx)
    if not m or k + m > x.dim() or any(i is None or i.dtype not in (torch.int64, torch.int32) for i in idx):
        return None
    if any(i.dim() > m for i in idx):
        return None
    flat = []
    for j, i in enumerate(idx):
        shape = [1] * (m - i.dim()) + list(i.shape)
        if any(s != 1 for a, s in enumerate(shape) if a != j):
            return None
        f = aten.reshape.default(i, [-1])
        f = aten.where.self(aten.lt.Scalar(f, 0), aten.add.Tensor(f, x.shape[k + j]), f)
        flat.append(f)
    return k, flat


def unsafe_index(x: torch.Tensor, indices):
    sep = _separable(x, indices)
    if sep is None:
        return aten.index.Tensor(x, indices)
    k, flat = sep
    out = x
    for j, f in enumerate(flat):
        out = aten.index_select.default(out, k + j, f)
    return out


def unsafe_index_put(x: torch.Tensor, indices, values: torch.Tensor, accumulate: bool = False):
    from .decompositions_gather import index_put_accumulate
    sep = _separable(x, indices) if accumulate and x.is_floating_point() else None
    if sep is None:
        return aten.index_put.default(x, indices, values, accumulate)
    k, flat = sep
    target = list(x.shape[:k]) + [f.shape[0] for f in flat] + list(x.shape[k + len(flat):])
    acc = aten.expand.default(values, target)
    for j in reversed(range(len(flat))):  # scatter-add the last indexed axis first
        shape = list(acc.shape)
        shape[k + j] = x.shape[k + j]
        zeros = aten.full.default(shape, 0.0, dtype=x.dtype, device=x.device)
        acc = index_put_accumulate(zeros, [None] * (k + j) + [flat[j]], acc, True)
        if acc is NotImplemented:
            return aten.index_put.default(x, indices, values, accumulate)
    return aten.add.Tensor(x, acc)


DECOMPOSITIONS = {
    aten._unsafe_index.Tensor: unsafe_index,
    aten._unsafe_index_put.default: unsafe_index_put,
}
