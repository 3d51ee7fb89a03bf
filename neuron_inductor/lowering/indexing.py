"""Lowerings of ops that move data without computing on it: gathers, scatters and assembly.

Every op here is a sequence of *phases* inside one kernel. A phase walks a logical region of the
output and either copies a logical region of an input into it (DMA load into an SBUF tile, DMA store
out), fills it with a constant (memset once, stores), or moves whole rows through an indirect DMA
(gather on load, scatter on store) whose row numbers come from a uint32 index tile. Phases run in
program order, so a later phase may overwrite what an earlier one wrote (the border fill of a pad,
the base copy under a ``slice_scatter``/``index_put``).

Regions and the tile walk of a phase live in ``regions.py`` (the plan: merged dims, partition and
free axes, chunks); this module holds the phases' emitters and the op lowerings. int64 tensors are
int32 word pairs: copied int64 -> int64 as a trailing pair dim; anything widened to int64 gets its
high word (the sign) stored.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import sympy
import torch
import torch.fx as fx

from ..ir import HBMAccess, TileRegion
from .builder import KernelBuilder
from .layout import hw_dtype, word_scale
from .loops import merge, nest, offsets, tiles
from .regions import It, LRegion, output_region, phase_tile, source_region, walk_regions
from .registry import KernelContext, register_lowering
from ..spec import AluOp

aten = torch.ops.aten


# ----------------------------------------------------------------------------------------- phases

def _sign_word(kb: KernelBuilder, src: TileRegion, it: It, free_chunk: int) -> TileRegion:
    """The high word of an int64 whose low word is ``src``: 0 or -1."""
    hi = phase_tile(kb, it, "int32", free_chunk, "hi").region(it.rows, it.cols)
    kb.tensor_scalar(hi, data=src, operand0=0.0, operand1=-1.0, op0=AluOp.less, op1=AluOp.multiply)
    return hi


def copy_phase(kb: KernelBuilder, dst: LRegion, src: LRegion, free_chunk: int) -> None:
    """``dst = src`` (``src`` broadcast to ``dst``'s sizes, cast to ``dst``'s dtype)."""
    if dst.numel == 0:
        return
    src = src.expand(dst.sizes)
    if dst.dtype == src.dtype:
        d, s = dst.hw(), src.hw()
        sizes = d.sizes

        def body(it: It) -> None:
            t = phase_tile(kb, it, d.tensor.dtype, free_chunk, "t")
            reg = t.region(it.rows, it.cols)
            kb.dma(reg, it.access(1, s))
            kb.dma(it.access(0, d), reg)
            kb.release(t)
        walk_regions(kb, sizes, [d, s], free_chunk, body)
        return
    s = src.word(0)
    if dst.dtype == "bool":
        tdt = s.tensor.dtype
    elif dst.dtype == "int64":
        tdt = "int32"
    else:
        tdt = hw_dtype(dst.dtype)
    lo = dst.word(0)
    regions = [lo, s] + ([dst.word(1)] if dst.dtype == "int64" else [])

    def body(it: It) -> None:
        t = phase_tile(kb, it, tdt, free_chunk, "t")
        reg = t.region(it.rows, it.cols)
        kb.dma(reg, it.access(1, s))
        if dst.dtype == "bool":
            b = phase_tile(kb, it, "uint8", free_chunk, "b")
            breg = b.region(it.rows, it.cols)
            kb.tensor_scalar(breg, data=reg, operand0=0.0, op0=AluOp.not_equal)
            kb.dma(it.access(0, lo), breg)
            kb.release(b)
        else:
            kb.dma(it.access(0, lo), reg)
        if dst.dtype == "int64":
            hi = _sign_word(kb, reg, it, free_chunk)
            kb.dma(it.access(2, regions[2]), hi)
            kb.release(hi.tile)
        kb.release(t)
    walk_regions(kb, dst.sizes, regions, free_chunk, body)


def fill_phase(kb: KernelBuilder, dst: LRegion, value: Any, free_chunk: int) -> None:
    """``dst = value`` everywhere; one memset per tile shape, then stores."""
    if dst.numel == 0:
        return
    if dst.dtype == "bool":
        words = [(dst.word(0), int(bool(value)))]
    elif dst.dtype == "int64":
        v = int(value)
        lo, hi = _to_i32(v & 0xFFFFFFFF), _to_i32((v >> 32) & 0xFFFFFFFF)
        # 0 and -1 have equal words: one fill over the word pairs keeps the stores contiguous
        words = [(dst.hw(), lo)] if lo == hi else [(dst.word(0), lo), (dst.word(1), hi)]
    elif dst.dtype in ("float32", "bfloat16", "float16"):
        words = [(dst.word(0), float(value))]
    else:
        words = [(dst.word(0), int(value))]
    for region, v in words:
        def body(it: It, region=region, v=v) -> None:
            t = phase_tile(kb, it, region.tensor.dtype, free_chunk, "fill")
            reg = t.region(it.rows, it.cols)
            kb.memset(reg, value=v)
            kb.dma(it.access(0, region), reg)
            kb.release(t)
        walk_regions(kb, region.sizes, [region], free_chunk, body)


def _row_view(numel: int, row: int, dim_size: int) -> tuple[int, int]:
    """The ``(rows, row)`` shape an indirect DMA sees the flat tensor as: the hardware multiplies
    each offset by the elements right of dim 0 of that shape, so it must be the row stride."""
    if row <= 0 or numel % row:
        raise NotImplementedError(f"indirect copy: rows of {row} elements do not tile the "
                                  f"{numel}-element tensor")
    if dim_size > _EXACT_INDEX:
        raise NotImplementedError(f"indirect copy over {dim_size} rows: offsets above 2^24 do not "
                                  "survive the int32 -> uint32 cast")
    return (numel // row, row)


#: offsets reach the uint32 index tile through an fp32 cast, exact up to 2^24
_EXACT_INDEX = 1 << 24


def _to_i32(u: int) -> int:
    return u - (1 << 32) if u >= (1 << 31) else u


@dataclass(frozen=True)
class IndirectPlan:
    """The loops of an indirect phase: index positions merged into ``idims`` (strides ``i_str`` in
    the index, ``di_str`` in ``direct``), axis ``P`` of them on partitions and the rest outer loops
    (``iouter``); the table's other dims merged into ``rdims`` (strides ``t_st`` / ``d_st``), the last
    one free (``F``, chunks of ``fc``) and the rest loops (``router``). Offsets and strides are in
    words (int32 halves of an int64 table)."""

    idims: list
    i_str: list
    di_str: list
    P: int
    rdims: list
    t_st: list
    d_st: list
    fc: int
    looped: bool
    row_stride: int
    view: tuple[int, int]
    offsets: tuple   # (table, direct, index) element offsets, in words

    @property
    def iouter(self) -> list[int]:
        return [a for a in range(len(self.idims)) if a != self.P]

    @property
    def F(self) -> int:
        return len(self.rdims) - 1

    @property
    def router(self) -> list[int]:
        return list(range(self.F))

    @property
    def Ps(self) -> int:
        return self.idims[self.P]

    @property
    def Fs(self) -> int:
        return self.rdims[self.F]


def plan_indirect(table: LRegion, dim: int, index: LRegion, direct: LRegion, free_chunk: int,
                  pmax: int) -> IndirectPlan:
    """Merge the index's dims and the table's other dims (see :class:`IndirectPlan`)."""
    ni = len(index.sizes)
    rest_sizes = list(table.sizes[:dim]) + list(table.sizes[dim + 1:])
    t_rest = list(table.strides[:dim]) + list(table.strides[dim + 1:])
    d_rest = list(direct.strides[:dim]) + list(direct.strides[dim + ni:])
    d_idx = list(direct.strides[dim:dim + ni])
    k = word_scale(table.dtype)
    row_stride = k * table.strides[dim]
    t_rest, d_rest, d_idx = [k * s for s in t_rest], [k * s for s in d_rest], [k * s for s in d_idx]
    if table.dtype == "int64":
        rest_sizes.append(2)
        t_rest.append(1)
        d_rest.append(1)
    ki = word_scale(index.dtype)
    idims, (i_str, di_str) = merge(index.sizes, [[ki * s for s in index.strides], d_idx])
    if not idims:
        idims, i_str, di_str = [1], [0], [0]
    P = max(range(len(idims)), key=lambda a: (idims[a], a))
    iouter = [a for a in range(len(idims)) if a != P]
    rdims, (t_st, d_st) = merge(rest_sizes, [t_rest, d_rest])
    if not rdims:
        rdims, t_st, d_st = [1], [0], [0]
    F = len(rdims) - 1
    Ps, Fs = idims[P], rdims[F]
    fc = min(Fs, free_chunk)
    looped = any(idims[a] > 1 for a in iouter) or Ps > pmax or any(rdims[a] > 1 for a in range(F)) \
        or Fs > fc
    view = _row_view(table.tensor.numel, row_stride, table.sizes[dim])
    return IndirectPlan(idims, i_str, di_str, P, rdims, t_st, d_st, fc, looped, row_stride, view,
                        (k * table.offset, k * direct.offset, ki * index.offset))


def indirect_phase(kb: KernelBuilder, *, gather: bool, table: LRegion, dim: int, index: LRegion,
                   direct: LRegion, free_chunk: int, wrap_negative: bool = False) -> None:
    """Move rows between ``table`` (indexed along ``dim`` by ``index``) and ``direct``.

    ``direct`` has sizes ``table.sizes[:dim] + index.sizes + table.sizes[dim+1:]``. With ``gather``
    ``direct[.., i.., ..] = table[.., index[i..], ..]`` (indirect load); else the scatter
    ``table[.., index[i..], ..] = direct[.., i.., ..]`` (indirect store). The index tile is loaded
    once per 128 index positions, which sit on partitions; the table's other dims are loops and the
    free axis.
    """
    if table.dtype != direct.dtype and "int64" in (table.dtype, direct.dtype):
        raise NotImplementedError("indirect copy between int64 and another dtype")
    if index.dtype not in ("int64", "int32"):
        raise NotImplementedError(f"index dtype {index.dtype}")
    if index.numel == 0 or direct.numel == 0:
        return
    pmax = kb.target.partitions
    pl = plan_indirect(table, dim, index, direct, free_chunk, pmax)
    t_off, d_off, i_off = pl.offsets
    with nest(kb, [pl.idims[a] for a in pl.iouter], "affine", "l") as lv, \
            tiles(kb, pl.Ps, pmax, "affine", "p") as (ip, rows):
        ioff, doff = offsets([pl.i_str, pl.di_str], pl.iouter, lv, [i_off, d_off])
        itile = _index_tile(kb, pl, index, rows, sympy.expand(ioff + pl.i_str[pl.P] * pmax * ip),
                            table.sizes[dim] if wrap_negative else None)
        _move_rows(kb, pl, gather, table, direct, t_off, doff + pl.di_str[pl.P] * pmax * ip,
                   itile.region(rows, 1), rows, free_chunk)
        kb.release(itile)
    if kb.plan:
        kb.plan += "; "
    kb.plan += (f"{'gather' if gather else 'scatter'} of {pl.Ps} index position(s) per "
                f"{[pl.idims[a] for a in pl.iouter]} on partitions (tiles of {pmax}), rows of {pl.rdims} "
                f"(free {pl.Fs} in chunks of {pl.fc})")


def _index_tile(kb: KernelBuilder, pl: IndirectPlan, index: LRegion, rows, offset, wrap: int | None):
    """The uint32 row numbers of one tile of index positions, read at ``offset``; the int32 -> uint32
    DMA casts through fp32, exact below 2^24. With ``wrap`` (the indexed dim's size) negative indices
    count from the end: idx += (idx < 0) * wrap, as torch's advanced indexing does."""
    pmax = kb.target.partitions
    it = It([], [], [], rows, sympy.Integer(1), min(pl.Ps, pmax), 1, pl.looped)
    shape = (it.tile_rows, 1) if pl.looped else (pmax, 1)
    src = HBMAccess(index.tensor, offset, ((pl.i_str[pl.P], rows), (1, 1)))
    itile = kb.tile(shape, "uint32", prefix="idx")
    ind = itile.region(rows, 1)
    if wrap is not None:
        raw = kb.tile(shape, "int32", prefix="raw")
        rreg = raw.region(rows, 1)
        kb.dma(rreg, src)
        neg = kb.tile(shape, "int32", prefix="neg")
        nreg = neg.region(rows, 1)
        kb.tensor_scalar(nreg, data=rreg, operand0=0.0, operand1=float(wrap), op0=AluOp.less,
                         op1=AluOp.multiply)
        kb.tensor_tensor(ind, data1=rreg, data2=nreg, op=AluOp.add)
        kb.release(neg)
        kb.release(raw)
    else:
        kb.dma(ind, src)
    return itile


def _move_rows(kb: KernelBuilder, pl: IndirectPlan, gather: bool, table: LRegion, direct: LRegion, toff, doff,
               ind: TileRegion, rows, free_chunk: int) -> None:
    """The table rows one index tile names, over the loops of the table's other dims and chunks of
    its free axis: through an SBUF tile, indirect on the table side."""
    t_st, d_st, F, fc = pl.t_st, pl.d_st, pl.F, pl.fc
    pmax = kb.target.partitions
    with nest(kb, [pl.rdims[a] for a in pl.router], "affine", "r") as rv, \
            tiles(kb, pl.Fs, fc, "affine", "f") as (jf, cols):
        toff, doff = offsets([t_st, d_st], pl.router, rv, [toff, doff])
        it = It([], [], [], rows, cols, min(pl.Ps, pmax), fc, pl.looped)
        t = phase_tile(kb, it, table.tensor.dtype, free_chunk, "rows")
        reg = t.region(rows, cols)
        tab = HBMAccess(table.tensor, sympy.expand(toff + t_st[F] * fc * jf),
                        ((pl.row_stride, rows), (t_st[F], cols)), indirect=ind, view=pl.view)
        dacc = HBMAccess(direct.tensor, sympy.expand(doff + d_st[F] * fc * jf),
                         ((pl.di_str[pl.P], rows), (d_st[F], cols)))
        if gather:
            kb.dma(reg, tab)
            kb.dma(dacc, reg)
        else:
            kb.dma(reg, dacc)
            kb.dma(tab, reg)
        kb.release(t)


# ----------------------------------------------------------------------------------------- helpers

def norm_dim(dim: int, rank: int) -> int:
    r = max(rank, 1)
    if not -r <= dim < r:
        raise NotImplementedError(f"dim {dim} out of range for rank {rank}")
    return dim % r


def node_arg(n: fx.Node, i: int, name: str, default: Any = None) -> Any:
    if len(n.args) > i:
        return n.args[i]
    return n.kwargs.get(name, default)


def free_chunk_of(cfg) -> int:
    return int(getattr(cfg, "free_chunk", 2048) or 2048)


# ----------------------------------------------------------------------------------------- lowerings

@register_lowering(aten.embedding.default, kind="kernel")
def lower_embedding(ctx: KernelContext, *args) -> None:
    """out[i.., :] = weight[indices[i..], :] as an indirect row gather."""
    n, sources, kb, out_tensors, out_meta, cfg = ctx.unpack()
    weight, indices = n.args[0], n.args[1]
    w = source_region(kb, sources[weight])
    if len(w.sizes) != 2:
        raise NotImplementedError("embedding weight must be 2-D")
    idx = source_region(kb, sources[indices])
    out = output_region(out_tensors, out_meta, n)
    indirect_phase(kb, gather=True, table=w, dim=0, index=idx, direct=out, free_chunk=free_chunk_of(cfg))


@register_lowering(aten.index_select.default, kind="kernel")
def lower_index_select(ctx: KernelContext, *args) -> None:
    """out = x.index_select(dim, index): an indirect gather along ``dim`` (index positions on
    partitions, the other dims of ``x`` as loops and free axis)."""
    n, sources, kb, out_tensors, out_meta, cfg = ctx.unpack()
    x, dim, index = n.args[0], n.args[1], n.args[2]
    xr = source_region(kb, sources[x])
    ir = source_region(kb, sources[index])
    out = output_region(out_tensors, out_meta, n)
    if not xr.sizes:  # 0-dim x: index_select behaves like a 1-element 1-D tensor
        xr = replace(xr, sizes=(1,), strides=(1,))
        out = replace(out, sizes=(1,) * max(len(ir.sizes), 1), strides=(1,) * max(len(ir.sizes), 1))
    d = norm_dim(dim, len(xr.sizes))
    if len(ir.sizes) == 0:
        ir = replace(ir, sizes=(1,), strides=(1,))
    if len(out.sizes) != len(xr.sizes):
        raise NotImplementedError("index_select output rank differs from its input")
    indirect_phase(kb, gather=True, table=xr, dim=d, index=ir, direct=out, free_chunk=free_chunk_of(cfg))


@register_lowering(aten.cat.default, kind="kernel")
def lower_cat(ctx: KernelContext, *args) -> None:
    """One copy phase per input into its slab of the output."""
    n, sources, kb, out_tensors, out_meta, cfg = ctx.unpack()
    tensors = n.args[0]
    out = output_region(out_tensors, out_meta, n)
    d = norm_dim(node_arg(n, 1, "dim", 0), len(out.sizes))
    start = 0
    for t in tensors:
        v = t.meta["val"]
        if v.numel() == 0:
            continue  # includes legacy 1-D empty tensors, which cat skips
        length = int(v.shape[d])
        copy_phase(kb, out.narrow(d, start, length), source_region(kb, sources[t]), free_chunk_of(cfg))
        start += length
    if start != out.sizes[d]:
        raise NotImplementedError(f"cat pieces cover {start} of {out.sizes[d]} along dim {d}")


def _slice_range(size: int, start, end, step: int) -> tuple[int, int]:
    """(first index, count) of ``range(size)[start:end:step]`` with torch's clamping."""
    r = range(size)[slice(start, end, step)]
    return (r.start if len(r) else 0), len(r)


@register_lowering(aten.slice_scatter.default, kind="kernel")
def lower_slice_scatter(ctx: KernelContext, *args) -> None:
    """out = base; out[.., start:end:step, ..] = src (two ordered copy phases)."""
    n, sources, kb, out_tensors, out_meta, cfg = ctx.unpack()
    base, src = n.args[0], n.args[1]
    out = output_region(out_tensors, out_meta, n)
    d = norm_dim(node_arg(n, 2, "dim", 0), len(out.sizes))
    step = node_arg(n, 5, "step", 1) or 1
    if step < 1:
        raise NotImplementedError("slice_scatter with a non-positive step")
    first, count = _slice_range(out.sizes[d], node_arg(n, 3, "start"), node_arg(n, 4, "end"), step)
    fc = free_chunk_of(cfg)
    copy_phase(kb, out, source_region(kb, sources[base]), fc)
    copy_phase(kb, out.narrow(d, first, count, step), source_region(kb, sources[src]), fc)


@register_lowering(aten.select_scatter.default, kind="kernel")
def lower_select_scatter(ctx: KernelContext, *args) -> None:
    """out = base; out.select(dim, index) = src."""
    n, sources, kb, out_tensors, out_meta, cfg = ctx.unpack()
    base, src, dim, index = n.args[0], n.args[1], n.args[2], n.args[3]
    out = output_region(out_tensors, out_meta, n)
    d = norm_dim(dim, len(out.sizes))
    size = out.sizes[d]
    if not -size <= index < size:
        raise NotImplementedError(f"select_scatter index {index} out of range for size {size}")
    fc = free_chunk_of(cfg)
    copy_phase(kb, out, source_region(kb, sources[base]), fc)
    copy_phase(kb, out.select(d, index % size), source_region(kb, sources[src]), fc)


@register_lowering(aten.constant_pad_nd.default, kind="kernel")
def lower_constant_pad(ctx: KernelContext, *args) -> None:
    """Fill the output with ``value`` (only if some pad is positive), then copy the kept part of the
    input into its window. Negative pads crop."""
    n, sources, kb, out_tensors, out_meta, cfg = ctx.unpack()
    x = n.args[0]
    pad = list(node_arg(n, 1, "pad"))
    value = node_arg(n, 2, "value", 0)
    value = 0 if value is None else value
    xr = source_region(kb, sources[x])
    out = output_region(out_tensors, out_meta, n)
    rank = len(xr.sizes)
    if len(pad) % 2 or len(pad) // 2 > rank:
        raise NotImplementedError(f"pad {pad} for rank {rank}")
    fc = free_chunk_of(cfg)
    src, dst = xr, out
    for i in range(len(pad) // 2):
        d = rank - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        keep = xr.sizes[d] - max(0, -lo) - max(0, -hi)
        if keep <= 0:
            src = None
            break
        src = src.narrow(d, max(0, -lo), keep)
        dst = dst.narrow(d, max(0, lo), keep)
    if src is None or dst.numel != out.numel:
        fill_phase(kb, out, value, fc)
    if src is not None:
        copy_phase(kb, dst, src, fc)


def _index_spec(n: fx.Node, rank: int) -> tuple[int, fx.Node]:
    indices = list(node_arg(n, 1, "indices"))
    real = [(i, a) for i, a in enumerate(indices) if a is not None]
    if len(real) != 1:
        raise NotImplementedError("index_put with other than exactly one index tensor")
    d, idx = real[0]
    v = idx.meta["val"]
    if v.dtype not in (torch.int64, torch.int32):
        raise NotImplementedError(f"index_put with a {v.dtype} index (masks are not lowered)")
    if d >= rank:
        raise NotImplementedError("index_put index on a missing dim")
    return d, idx


@register_lowering(aten.index_put.default, kind="kernel")
def lower_index_put(ctx: KernelContext, *args) -> None:
    """out = x; out[.., idx, ..] = values: a copy phase then an indirect row scatter (the static
    KV-cache update). Negative indices wrap as in torch."""
    n, sources, kb, out_tensors, out_meta, cfg = ctx.unpack()
    x, values = n.args[0], n.args[2]
    if node_arg(n, 3, "accumulate", False):
        raise NotImplementedError("index_put with accumulate=True (duplicate rows must add)")
    xr = source_region(kb, sources[x])
    d, idx = _index_spec(n, len(xr.sizes))
    ir = source_region(kb, sources[idx])
    vr = source_region(kb, sources[values])
    out = output_region(out_tensors, out_meta, n)
    fc = free_chunk_of(cfg)
    copy_phase(kb, out, xr, fc)
    if ir.numel == 0:
        return
    target = out.sizes[:d] + ir.sizes + out.sizes[d + 1:]
    vr = vr.expand(target)
    if vr.dtype != out.dtype:
        raise NotImplementedError(f"index_put values {vr.dtype} into {out.dtype}")
    indirect_phase(kb, gather=False, table=out, dim=d, index=ir, direct=vr, free_chunk=fc,
                   wrap_negative=True)


@register_lowering(aten.copy.default, kind="kernel")
def lower_copy(ctx: KernelContext, *args) -> None:
    """Functional copy: out (dst's shape and dtype) = src broadcast and cast."""
    n, sources, kb, out_tensors, out_meta, cfg = ctx.unpack()
    src = n.args[1]
    out = output_region(out_tensors, out_meta, n)
    copy_phase(kb, out, source_region(kb, sources[src]), free_chunk_of(cfg))
