"""Value-selecting reductions (``max.dim``, ``min.dim``, ``argmax``, ``argmin``, small-k ``topk``) in
ops we lower: fused max/min reductions, compares against an iota and a min over positions.

Along ``dim`` of length ``n``, a max with its index is three steps that fuse into one kernel (the
reduced axis on the free axis, as a softmax's max and sum):

* ``m = amax(x)`` — a free-axis ``tensor_reduce``; NaN propagates, as torch's max does;
* ``hit = (x == m) | (x != x)`` — where the row holds a NaN, ``m`` is NaN and only the NaNs hit;
* ``index = amin(where(hit, iota, n))`` — the *first* hitting position, torch's tie rule.

``topk`` (k <= ``TOPK_LIMIT``, the MoE-routing sizes) repeats that k times, each round taking the
first remaining maximum and marking its position as taken, so the values come out sorted (largest
first, or smallest first with ``largest=False``), NaN counted above every number as in torch, and
equal values in increasing index order. torch leaves the order of ties inside ``topk`` unspecified
(its CPU partial sort returns them in no fixed order), so tied *indices* may differ from eager's while
the values and the set they name agree; ``max.dim``/``argmax`` follow torch's documented first-index
rule exactly. The backward of all of them is
``scatter`` of the gradient into zeros at the indices, which ``decompositions_gather`` lowers.
"""
from __future__ import annotations

import math

import torch

aten = torch.ops.aten

#: positions along the selected dim are float32 values up to twice the length, exact below 2**24
EXACT_POSITIONS = 1 << 23
#: the largest k lowered as repeated selections; larger k (sorting) stays a declared fallback
TOPK_LIMIT = 8


def _iota_along(n: int, d: int, rank: int, device) -> torch.Tensor:
    """``arange(n)`` shaped to broadcast along dim ``d`` of a rank-``rank`` tensor."""
    iota = aten.arange.start_step(0, n, 1, dtype=torch.float32, device=device)
    return aten.view.default(iota, [n] + [1] * (rank - 1 - d)) if d < rank - 1 else iota


def _first_extreme(x: torch.Tensor, d: int, largest: bool, taken: torch.Tensor | None = None,
                   nan_last: bool = False):
    """(value, first index) of the max (min) of ``x`` along ``d`` kept as a size-1 dim, over the
    positions not ``taken``. NaN is the extreme whenever one is present, except with ``nan_last``
    (a smallest-first ``topk``, where torch orders NaN above every number): then a NaN is picked
    only when nothing else remains.

    Positions are float32 (exact below ``EXACT_POSITIONS``): a float min is one ``tensor_reduce``
    wherever the iota is made, while an int64 one needs a proven bound the fused kernel only has
    when the iota is generated in the same kernel. The index is float32 here; callers convert."""
    n = x.shape[d]
    is_float = x.is_floating_point()
    if is_float:
        fill = -math.inf if largest else math.inf
    else:
        fill = torch.iinfo(x.dtype).min if largest else torch.iinfo(x.dtype).max
    nan = aten.ne.Tensor(x, x) if is_float else None
    out = taken
    if nan_last and nan is not None:
        out = nan if taken is None else aten.logical_or.default(taken, nan)
    xm = x if out is None else aten.where.self(out, aten.scalar_tensor.default(fill, dtype=x.dtype), x)
    m = (aten.amax.default if largest else aten.amin.default)(xm, [d], True)
    hit = aten.eq.Tensor(xm, m)
    if is_float and not nan_last:
        hit = aten.logical_or.default(hit, aten.ne.Tensor(xm, xm))
    if out is not None:
        hit = aten.logical_and.default(hit, aten.logical_not.default(out))
    iota = _iota_along(n, d, x.dim(), x.device)
    miss = aten.scalar_tensor.default(float(2 * n), dtype=torch.float32)
    if nan_last and nan is not None:
        # an untaken NaN ranks after every number: position n + i, reached only when no number hits
        spare = nan if taken is None else aten.logical_and.default(nan, aten.logical_not.default(taken))
        miss = aten.where.self(spare, aten.add.Tensor(iota, float(n)), miss)
    pos = aten.where.self(hit, iota, miss)
    idx = aten.amin.default(pos, [d], True)
    if nan_last and nan is not None:
        late = aten.ge.Scalar(idx, float(n))
        m = aten.where.self(late, aten.scalar_tensor.default(math.nan, dtype=x.dtype), m)
        idx = aten.where.self(late, aten.sub.Tensor(idx, float(n)), idx)
    return m, idx, iota


def _legal(x: torch.Tensor, d: int) -> bool:
    return x.dim() > 0 and 0 < x.shape[d] < EXACT_POSITIONS and x.numel() > 0 and x.dtype != torch.bool \
        and not x.is_complex()


def _select(x: torch.Tensor, dim: int, keepdim: bool, largest: bool):
    if x.dim() == 0:
        return NotImplemented
    d = dim % x.dim()
    if not _legal(x, d):
        return NotImplemented
    m, idx, _ = _first_extreme(x, d, largest)
    idx = aten._to_copy.default(idx, dtype=torch.int64)
    if not keepdim:
        m, idx = aten.squeeze.dims(m, [d]), aten.squeeze.dims(idx, [d])
    return m, idx


def max_dim(x: torch.Tensor, dim: int, keepdim: bool = False):
    """``torch.max(x, dim)``: values and first indices of the maxima (NaN wins)."""
    return _select(x, dim, keepdim, True)


def min_dim(x: torch.Tensor, dim: int, keepdim: bool = False):
    """``torch.min(x, dim)``: values and first indices of the minima (NaN wins)."""
    return _select(x, dim, keepdim, False)


def _arg(x: torch.Tensor, dim, keepdim: bool, largest: bool):
    if dim is None:
        if x.numel() == 0:
            return NotImplemented
        r = _select(aten.view.default(x, [-1]), 0, False, largest)
        if r is NotImplemented:
            return r
        idx = r[1]
        return aten.view.default(idx, [1] * x.dim()) if keepdim else idx
    if x.dim() == 0:
        return NotImplemented
    r = _select(x, dim, keepdim, largest)
    return r if r is NotImplemented else r[1]


def argmax(x: torch.Tensor, dim=None, keepdim: bool = False):
    """``torch.argmax``: the first index of the maximum (of the flattened tensor without ``dim``)."""
    return _arg(x, dim, keepdim, True)


def argmin(x: torch.Tensor, dim=None, keepdim: bool = False):
    """``torch.argmin``: the first index of the minimum (of the flattened tensor without ``dim``)."""
    return _arg(x, dim, keepdim, False)


def topk(x: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
    """The ``k`` largest (smallest) values along ``dim`` and their indices, sorted, for
    ``k <= TOPK_LIMIT``: ``k`` rounds of "first remaining extreme, then mark it taken".

    A taken position is filled with the round's identity (-inf / +inf, an integer type's limit) and
    excluded from the hits, so each round's extreme is the value of an untaken position: the one
    its index names."""
    if x.dim() == 0 or not 0 < k <= TOPK_LIMIT:
        return NotImplemented
    d = dim % x.dim()
    if not _legal(x, d) or k > x.shape[d]:
        return NotImplemented
    taken = None
    vals, idxs = [], []
    for _ in range(k):
        m, idx, iota = _first_extreme(x, d, largest, taken, nan_last=not largest)
        vals.append(m)
        idxs.append(idx)
        now = aten.eq.Tensor(iota, idx)
        taken = now if taken is None else aten.logical_or.default(taken, now)
    if k == 1:
        return vals[0], aten._to_copy.default(idxs[0], dtype=torch.int64)
    return aten.cat.default(vals, d), aten._to_copy.default(aten.cat.default(idxs, d), dtype=torch.int64)


#: op -> decomposition, merged into the table by ``decompositions.decomposition_table``
SELECT_DECOMPOSITIONS = {
    aten.max.dim: max_dim,
    aten.min.dim: min_dim,
    aten.argmax.default: argmax,
    aten.argmin.default: argmin,
    aten.topk.default: topk,
}
