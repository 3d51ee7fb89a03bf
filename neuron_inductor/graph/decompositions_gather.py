"""``gather``, ``scatter_add`` (gather's backward) and ``scatter`` in ops we lower, for every legal index shape.

``torch.gather(x, dim, index)`` reads ``x[..., index[..., j, ...], ...]``; the index may be smaller
than ``x`` on *every* dim, and then only the leading part of ``x`` along the other dims is read. We
first narrow ``x`` to that part, then either

* compare with an iota and take a masked sum along ``dim`` (one fused pointwise + reduction, the
  cross-entropy pattern) while the compare (index elements x ``x.shape[dim]``) stays small and
  ``x`` is floating point, or
* gather single elements with one flat ``index_select`` (an indirect DMA) at flat offsets computed
  from the index, for wide gathers where the compare would be quadratic and for integer and bool
  ``x`` (bit-exact at any magnitude, and the result keeps ``x``'s dtype).

``scatter_add(x, dim, index, src)`` is the transpose: a masked sum over the index positions adds
``src`` into a zero block the size of the addressed part of ``x``, padded back to ``x``'s shape;
above the compare limit, an index broadcast over some dims (one distance table for every batch row
and head) becomes a one-hot matrix of its distinct part times ``src`` (a batched matmul). Repeated
indices add up, as in torch.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

#: compare size (index elements x length of the gathered axis) up to which a gather or scatter_add
#: is a compare + masked sum; wider gathers move single elements, wider scatter_adds are a one-hot
#: matmul when the index is broadcast over some dims (``_shared_index_scatter_add``), else fall back
COMPARE_LIMIT = 1 << 20
#: elements of the one-hot matrix a broadcast-index scatter_add materialises (16 MiB in fp32)
ONEHOT_LIMIT = 1 << 22


def _narrow_to(x: torch.Tensor, shape, skip: int) -> torch.Tensor:
    """``x[:shape[0], :shape[1], ...]`` on every dim except ``skip``."""
    for k in range(x.dim()):
        if k != skip and shape[k] != x.shape[k]:
            x = aten.slice.Tensor(x, k, 0, shape[k])
    return x


def _to_last(x: torch.Tensor, d: int) -> torch.Tensor:
    if d == x.dim() - 1:
        return x
    perm = [k for k in range(x.dim()) if k != d] + [d]
    return aten.permute.default(x, perm)


def _from_last(x: torch.Tensor, d: int) -> torch.Tensor:
    if d == x.dim() - 1:
        return x
    perm = list(range(x.dim() - 1))
    perm.insert(d, x.dim() - 1)
    return aten.permute.default(x, perm)


def _legal(x: torch.Tensor, index: torch.Tensor) -> bool:
    return (x.dim() == index.dim() and x.dim() > 0 and index.dtype in (torch.int64, torch.int32)
            and x.numel() > 0 and index.numel() > 0)


def gather(x: torch.Tensor, dim: int, index: torch.Tensor, *, sparse_grad: bool = False):
    """A masked sum against an iota along ``dim`` (narrow gathers) or a flat element gather."""
    if not _legal(x, index):
        return NotImplemented
    d = dim % x.dim()
    n, m = x.shape[d], index.shape[d]
    x = _narrow_to(x, index.shape, d)
    # integers and bools move elements: a masked sum of them is promoted to int64 by torch (the
    # result dtype would change) and is exact here only for values proven below 2**24
    if index.numel() * n <= COMPARE_LIMIT and x.is_floating_point():
        xl, il = _to_last(x, d), _to_last(index, d)
        iota = aten.arange.start_step(0, n, 1, dtype=torch.int64, device=x.device)
        if m == 1:  # one pick per row: keep the reduced dim (the cross-entropy shape)
            hit = aten.eq.Tensor(iota, il)
            picked = aten.where.self(hit, xl, aten.scalar_tensor.default(0, dtype=x.dtype))
            return _from_last(aten.sum.dim_IntList(picked, [-1], True), d)
        hit = aten.eq.Tensor(iota, aten.unsqueeze.default(il, -1))           # [..., m, n]
        picked = aten.where.self(hit, aten.unsqueeze.default(xl, -2),
                                 aten.scalar_tensor.default(0, dtype=x.dtype))
        return _from_last(aten.sum.dim_IntList(picked, [-1]), d)
    return _flat_gather(x, d, index)


def _flat_gather(x: torch.Tensor, d: int, index: torch.Tensor) -> torch.Tensor:
    """``x.reshape(-1)[offsets]`` with offsets = sum_k pos_k * stride_k, the index along ``d``."""
    x = aten.clone.default(x, memory_format=torch.contiguous_format)
    shape = list(index.shape)
    strides = [1] * x.dim()
    for k in range(x.dim() - 2, -1, -1):
        strides[k] = strides[k + 1] * x.shape[k + 1]
    off = aten.mul.Tensor(aten._to_copy.default(index, dtype=torch.int64), strides[d]) \
        if strides[d] != 1 else aten._to_copy.default(index, dtype=torch.int64)
    for k in range(x.dim()):
        if k == d or shape[k] == 1:
            continue
        view = [1] * x.dim()
        view[k] = shape[k]
        pos = aten.arange.start_step(0, shape[k] * strides[k], strides[k], dtype=torch.int64,
                                     device=x.device)
        off = aten.add.Tensor(off, aten.view.default(pos, view))
    flat = aten.index_select.default(aten.view.default(x, [-1]), 0, aten.view.default(off, [-1]))
    return aten.view.default(flat, shape)


def scatter_add(x: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor):
    """``x`` plus, at every index position, ``src`` added to the element it names along ``dim``."""
    if not _legal(x, index) or src.dim() != x.dim() or not x.is_floating_point():
        return NotImplemented
    d = dim % x.dim()
    n = x.shape[d]
    src = _narrow_to(src, index.shape, -1)
    if index.numel() * n <= COMPARE_LIMIT:
        il, sl = _to_last(index, d), _to_last(src, d)
        iota = aten.arange.start_step(0, n, 1, dtype=torch.int64, device=x.device)
        hit = aten.eq.Tensor(aten.unsqueeze.default(il, -1), iota)             # [..., m, n]
        vals = aten.where.self(hit, aten.unsqueeze.default(sl, -1),
                               aten.scalar_tensor.default(0, dtype=src.dtype))
        upd = _from_last(aten.sum.dim_IntList(vals, [-2]), d)                  # x's shape, led part
    else:
        upd = _shared_index_scatter_add(d, n, index, src)
        if upd is NotImplemented:
            return upd
    if upd.dtype != x.dtype:
        upd = aten._to_copy.default(upd, dtype=x.dtype)
    pad = []
    for k in range(x.dim() - 1, -1, -1):
        pad += [0, x.shape[k] - upd.shape[k]]
    if any(pad):
        upd = aten.constant_pad_nd.default(upd, pad, 0.0)
    return aten.add.Tensor(x, upd)


def _shared_index_scatter_add(d: int, n: int, index: torch.Tensor, src: torch.Tensor):
    """The scatter_add update ``upd[.., j, ..] = sum_m src[.., m, ..] * (index[.., m, ..] == j)``
    when ``index`` is broadcast (stride 0) over some dims: a one-hot matrix built once from the
    index's distinct part (up to ``ONEHOT_LIMIT`` elements), then a batched TensorE matmul that
    applies it to every broadcast copy of ``src`` (the backward of a relative-position bias gathered
    with one distance table for every batch row and head). Only the distinct part is compared: the
    broadcast copies cost matmul work, not compares. Repeated indices add up in the matmul's sum."""
    r = index.dim()
    shared = [k for k in range(r) if k != d and index.shape[k] > 1 and index.stride()[k] == 0]
    distinct = index
    for k in shared:
        distinct = aten.slice.Tensor(distinct, k, 0, 1)
    if not shared or distinct.numel() * n > ONEHOT_LIMIT:
        return NotImplemented
    rest = [k for k in range(r) if k != d]                   # _to_last's leading dims, in order
    own = [p for p, k in enumerate(rest) if k not in shared]
    bcast = [p for p, k in enumerate(rest) if k in shared]
    m = index.shape[d]
    sl = aten.permute.default(_to_last(src, d), own + bcast + [r - 1])      # [own.., bcast.., m]
    lead = [src.shape[rest[p]] for p in own]
    wide = [src.shape[rest[p]] for p in bcast]
    n_own, n_wide = 1, 1
    for s in lead:
        n_own *= s
    for s in wide:
        n_wide *= s
    iota = aten.arange.start_step(0, n, 1, dtype=torch.int64, device=src.device)
    hit = aten.eq.Tensor(aten.unsqueeze.default(_to_last(distinct, d), -1), iota)   # [.., m, n]
    onehot = aten._to_copy.default(aten.permute.default(hit, own + bcast + [r - 1, r]), dtype=src.dtype)
    onehot = aten.reshape.default(onehot, [n_own, m, n])
    upd = aten.bmm.default(aten.reshape.default(sl, [n_own, n_wide, m]), onehot)   # [own, bcast, n]
    upd = aten.view.default(upd, lead + wide + [n])
    order = own + bcast + [r - 1]
    upd = aten.permute.default(upd, [order.index(p) for p in range(r)])
    return _from_last(upd, d)


#: index positions along ``dim`` up to which a ``scatter`` is a chain of compare-and-selects (one
#: per position, in order, so the last write wins as in torch's CPU loop)
SCATTER_CHAIN = 8


def _put_leading(x: torch.Tensor, part: torch.Tensor, dims: list[int]) -> torch.Tensor:
    """``x`` with its leading block of ``part``'s shape (smaller on ``dims``) replaced by ``part``."""
    if not dims:
        return part
    k = dims[0]
    inner = aten.slice.Tensor(x, k, 0, part.shape[k])
    return aten.slice_scatter.default(x, _put_leading(inner, part, dims[1:]), k, 0, part.shape[k])


def scatter_src(x: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor):
    """``x.scatter(dim, index, src)`` on any axis: the written element takes ``src``, the rest ``x``.

    Up to ``SCATTER_CHAIN`` positions along ``dim`` (top-k routing's and max.dim's backward: the
    gradient scattered into zeros) it is one compare-and-select per position; more positions take
    a masked reduction over them that keeps, for each element, the *last* position naming it, so
    repeated indices resolve as torch's CPU loop does (torch leaves the order unspecified)."""
    if not _legal(x, index) or src.dim() != x.dim():
        return NotImplemented
    d = dim % x.dim()
    n, m = x.shape[d], index.shape[d]
    if index.numel() * n > COMPARE_LIMIT or (m > SCATTER_CHAIN and not x.is_floating_point()):
        return NotImplemented
    src = _narrow_to(src, index.shape, -1)
    if src.dtype != x.dtype:
        src = aten._to_copy.default(src, dtype=x.dtype)
    part = _narrow_to(x, index.shape, d)
    il, sl, out = _to_last(index, d), _to_last(src, d), _to_last(part, d)
    iota = aten.arange.start_step(0, n, 1, dtype=torch.int64, device=x.device)
    if m <= SCATTER_CHAIN:
        for j in range(m):
            hit = aten.eq.Tensor(iota, aten.slice.Tensor(il, -1, j, j + 1))
            out = aten.where.self(hit, aten.slice.Tensor(sl, -1, j, j + 1), out)
    else:
        hit = aten.eq.Tensor(aten.unsqueeze.default(il, -1), iota)                 # [..., m, n]
        jf = aten.view.default(aten.arange.start_step(0, m, 1, dtype=torch.float32, device=x.device),
                               [m, 1])
        last = aten.amax.default(aten.where.self(hit, jf, aten.scalar_tensor.default(-1.0)), [-2], True)
        pick = aten.logical_and.default(hit, aten.eq.Tensor(jf, last))
        val = aten.sum.dim_IntList(aten.where.self(pick, aten.unsqueeze.default(sl, -1),
                                                   aten.scalar_tensor.default(0, dtype=x.dtype)), [-2])
        if val.dtype != x.dtype:
            val = aten._to_copy.default(val, dtype=x.dtype)
        out = aten.where.self(aten.ge.Scalar(aten.squeeze.dims(last, [-2]), 0), val, out)
    out = _from_last(out, d)
    return _put_leading(x, out, [k for k in range(x.dim()) if k != d and part.shape[k] != x.shape[k]])


#: op -> decomposition, merged into the table by ``decompositions.decomposition_table``
GATHER_DECOMPOSITIONS = {
    aten.gather.default: gather,
    aten.scatter_add.default: scatter_add,
    aten.scatter.src: scatter_src,
}


def index_put_accumulate(x: torch.Tensor, indices, values: torch.Tensor, accumulate: bool = False):
    """``x.index_put_([idx], v, accumulate=True)`` on dim 0 (the backward of a row gather) as
    ``x + onehot(idx)^T @ v``: a TensorE matmul in which duplicate rows add up, instead of a
    read-modify-write scatter. An index on a later dim (``[None, idx]``: index_select's backward
    along dim 1) is the same with that dim moved to the front."""
    if not accumulate:
        return _masked_fill(x, indices, values)
    k = len(indices) - 1
    if not indices or any(i is not None for i in indices[:-1]) or indices[-1] is None \
            or indices[-1].dtype not in (torch.int64, torch.int32) or not x.is_floating_point() \
            or k >= x.dim():
        return NotImplemented
    if k:
        idx = indices[-1]
        # values broadcast against x[:, ..., idx, ...]: dims before k, idx's dims, the rest
        target = list(x.shape[:k]) + list(idx.shape) + list(x.shape[k + 1:])
        vals = aten.expand.default(values, target)
        ni = idx.dim()
        perm = list(range(k, k + ni)) + list(range(k)) + list(range(k + ni, len(target)))
        xm = aten.permute.default(x, [k] + list(range(k)) + list(range(k + 1, x.dim())))
        out = index_put_accumulate(xm, [idx], aten.permute.default(vals, perm), True)
        if out is NotImplemented:
            return out
        back = list(range(1, k + 1)) + [0] + list(range(k + 1, x.dim()))
        return aten.permute.default(out, back)
    idx = indices[0]
    rows, rest = x.shape[0], list(x.shape[1:])
    width = 1
    for s in rest:
        width *= s
    flat = aten.view.default(idx, [-1, 1])
    flat = aten.where.self(aten.lt.Scalar(flat, 0), aten.add.Tensor(flat, rows), flat)
    iota = aten.arange.start_step(0, rows, 1, dtype=torch.int64, device=x.device)
    onehot = aten._to_copy.default(aten.eq.Tensor(flat, iota), dtype=x.dtype)
    vals = aten.expand.default(values, list(idx.shape) + rest)
    vals = torch.ops.aten.reshape.default(vals, [-1, width])
    upd = aten.mm.default(aten.permute.default(onehot, [1, 0]), vals)
    return aten.add.Tensor(x, aten.view.default(upd, [rows] + rest))


def _masked_fill(x: torch.Tensor, indices, values: torch.Tensor):
    """``x[mask] = v`` with one bool mask over x's leading dims and a single value (tensor-parallel
    embeddings zero the rows of ids outside their shard this way) as a ``where``."""
    if len(indices) != 1 or indices[0] is None or indices[0].dtype != torch.bool:
        return NotImplemented
    mask = indices[0]
    if values.numel() != 1 or tuple(mask.shape) != tuple(x.shape[:mask.dim()]):
        return NotImplemented
    mask = aten.view.default(mask, list(mask.shape) + [1] * (x.dim() - mask.dim()))
    value = aten._to_copy.default(aten.view.default(values, []), dtype=x.dtype)
    return aten.where.self(mask, value, x)
