"""Rotary position embedding (forward and backward) as one kernel with whole-head rows.

``neuron_inductor::rotary(x, cos, sin, backward)`` is what ``graph.rotary_pattern`` turns the
decomposed ``x * cos + rotate_half(x) * sin`` (and its gradient ``g * cos + rotate_half^T(g *
sin)``) into. With ``n`` the half of the last axis ``D`` and ``x1 = x[..., :n]``, ``x2 = x[..., n:]``:

    forward:  out[..., :n] = x1 * cos[:n] - x2 * sin[:n];   out[..., n:] = x2 * cos[n:] + x1 * sin[n:]
    backward: out[..., :n] = x1 * cos[:n] + x2 * sin[n:];   out[..., n:] = x2 * cos[n:] - x1 * sin[:n]

so both are ``out_j = x_j * cos + partner(x_j) * ss`` with ``ss`` a signed (and, backward, half-swapped)
copy of ``sin`` made once per row tile. The elementwise decomposition walks one half-head (64
elements, 128-byte DMA rows) per tile and loads ``x`` three times (itself and both halves) and
``cos``/``sin`` once per head; here a tile holds token rows on partitions and every head of the row on
the free axis (one DMA row of ``heads x D`` elements when the heads are adjacent, as in a QKV
projection's output), ``x`` is loaded once and the tables once per row tile. The partner half is a
free-axis offset inside the tile. Intermediates are fp32; the result is rounded once on store, as in
the fused elementwise kernels.
"""
from __future__ import annotations

import operator
from dataclasses import replace

import torch
import torch.fx as fx

from ..ir import HBMAccess, TileRegion
from .builder import KernelBuilder, ceil_div
from .layout import LoweringError, broadcast_strides, hw_dtype
from .loops import maybe_loop, ragged
from .regions import LRegion, output_region, source_region
from .registry import KernelContext, register_lowering
from ..spec import AluOp, Engine

#: free-axis elements of one x tile (heads x D); fp32 intermediates of this width fit SBUF easily
MAX_FREE = 4096


@torch.library.custom_op("neuron_inductor::rotary", mutates_args=())
def rotary(xs: list[torch.Tensor], cos: torch.Tensor, sin: torch.Tensor, backward: bool) -> list[torch.Tensor]:
    """Reference (eager) rotary embedding of each of ``xs`` (sharing the tables), forward or its
    input gradient (module docstring)."""
    out = []
    for x in xs:
        n = x.shape[-1] // 2
        if backward:
            y = x * sin
            out.append(x * cos + torch.cat((y[..., n:], -y[..., :n]), dim=-1))
        else:
            out.append(x * cos + torch.cat((-x[..., n:], x[..., :n]), dim=-1) * sin)
    return out


@rotary.register_fake
def _(xs, cos, sin, backward):
    return [torch.empty_like(x) for x in xs]


ROTARY = torch.ops.neuron_inductor.rotary.default


@torch.library.custom_op("neuron_inductor::rotary_cat", mutates_args=())
def rotary_cat(xs: list[torch.Tensor], n_rot: int, cos: torch.Tensor, sin: torch.Tensor, backward: bool,
               u: int, perm: list[int], dim: int) -> torch.Tensor:
    """``cat([permute(unsqueeze(y_i, u), perm) ...], dim)`` with ``y_i = rotary(xs[i])`` for the first
    ``n_rot`` inputs and ``xs[i]`` for the rest (the rotary backward feeding the dq/dk/dv concatenation)."""
    rot = rotary(list(xs[:n_rot]), cos, sin, backward)
    ys = list(rot) + list(xs[n_rot:])
    return torch.cat([y.unsqueeze(u).permute(perm) for y in ys], dim).contiguous()


@rotary_cat.register_fake
def _(xs, n_rot, cos, sin, backward, u, perm, dim):
    return torch.cat([x.unsqueeze(u).permute(perm) for x in xs], dim).contiguous()


ROTARY_CAT = torch.ops.neuron_inductor.rotary_cat.default


def table_axes(x_shape, table_shape, table_strides) -> list[int] | str:
    """The axes of ``x`` (besides the last) a table varies along, or why it does not broadcast."""
    st = broadcast_strides(list(table_shape), list(table_strides), list(x_shape))
    if st is None:
        return "tables do not broadcast to x"
    return [i for i in range(len(x_shape) - 1) if st[i] != 0 and x_shape[i] > 1]


def axes_plan(x_shape, cos: torch.Tensor, sin: torch.Tensor) -> tuple[int, int | None, list[int]] | str:
    """(rows axis, heads axis, outer axes) of the kernel, or why it cannot run.

    The rows (tokens: the largest axis the tables vary along) go on partitions and each table row
    tile is loaded once; the heads (the largest axis the tables are constant along) share it on the
    free axis; every other axis is an outer loop (the tables may vary along those, e.g. per-batch
    positions)."""
    ta, sa = table_axes(x_shape, cos.shape, cos.stride()), table_axes(x_shape, sin.shape, sin.stride())
    if isinstance(ta, str) or isinstance(sa, str):
        return "tables do not broadcast to x"
    varying = sorted(set(ta) | set(sa))
    if not varying:
        return "tables constant over every row"
    r = max(varying, key=lambda i: x_shape[i])
    cands = [i for i in range(len(x_shape) - 1) if i not in varying and x_shape[i] > 1]
    h = max(cands, key=lambda i: x_shape[i]) if cands else None
    outer = [i for i in range(len(x_shape) - 1) if i not in (r, h) and x_shape[i] > 1]
    return r, h, outer


def supported(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out: torch.Tensor) -> str | None:
    """Why the kernel cannot take these values (None: it can)."""
    if x.dim() < 2 or x.shape[-1] % 2 or x.shape[-1] < 2:
        return "last axis must be even"
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16) or \
            cos.dtype != x.dtype or sin.dtype != x.dtype or out.dtype != x.dtype:
        return "x, tables and result must share one float dtype"
    if x.stride(-1) != 1 or out.stride(-1) != 1 or cos.stride(-1) != 1 or sin.stride(-1) != 1:
        return "last axis must be contiguous"
    if tuple(cos.shape) != tuple(sin.shape) or tuple(out.shape) != tuple(x.shape):
        return "shapes"
    if x.numel() == 0:
        return "empty"
    plan = axes_plan(x.shape, cos, sin)
    return plan if isinstance(plan, str) else None


def _chunk(heads: int, D: int) -> int:
    """Heads per tile: the largest divisor of ``heads`` whose row fits ``MAX_FREE`` elements."""
    best = 1
    for c in range(1, heads + 1):
        if heads % c == 0 and c * D <= max(MAX_FREE, D):
            best = c
    return best


@register_lowering(ROTARY, kind="kernel")
def lower_rotary(ctx: KernelContext, *args) -> None:
    """out[i] = rotary(xs[i], cos, sin) (forward) or its input gradient (``backward``), one pass over
    the tables' row tiles for all of ``xs``."""
    n, sources, kb, out_tensors, out_meta, cfg = ctx.unpack()
    xs, c_n, s_n, backward = n.args
    outs = {u.args[1]: u for u in n.users if u.target is operator.getitem and u in out_tensors}
    items = []
    for i, x_n in enumerate(xs):
        if i not in outs:
            continue
        why = supported(x_n.meta["val"], c_n.meta["val"], s_n.meta["val"], outs[i].meta["val"])
        if why:
            raise LoweringError(f"rotary: {why}")
        items.append((x_n, output_region(out_tensors, out_meta, outs[i]), True))
    emit_rotary(kb, sources, items, c_n, s_n, bool(backward))


@register_lowering(ROTARY_CAT, kind="kernel")
def lower_rotary_cat(ctx: KernelContext, *args) -> None:
    """cat([permute(unsqueeze(y_i, u), perm)], dim) with y_i the rotary of xs[i] for i < n_rot and
    xs[i] itself after: each piece is written straight into its slot of the concatenation."""
    n, sources, kb, out_tensors, out_meta, cfg = ctx.unpack()
    xs, n_rot, c_n, s_n, backward, u, perm, dim = n.args
    out = output_region(out_tensors, out_meta, n)
    items = []
    for i, x_n in enumerate(xs):
        items.append((x_n, piece_region(out, i, dim, u, perm), i < n_rot))
    emit_rotary(kb, sources, items, c_n, s_n, bool(backward))


def piece_region(out, i: int, dim: int, u: int, perm) -> LRegion:
    """The slot of piece ``i`` of the concatenation along ``dim``, in the piece source's own axes:
    the piece is ``permute(unsqueeze(src, u), perm)``, so its axis j is axis ``perm[j]`` of the
    unsqueezed source."""
    st_u = [0] * len(perm)
    for j, pj in enumerate(perm):
        st_u[pj] = out.strides[j]
    sz_u = [0] * len(perm)
    for j, pj in enumerate(perm):
        sz_u[pj] = 1 if j == dim else out.sizes[j]
    return replace(out, offset=out.offset + i * out.strides[dim],
                   sizes=tuple(sz_u[:u] + sz_u[u + 1:]), strides=tuple(st_u[:u] + st_u[u + 1:]))


def emit_rotary(kb: KernelBuilder, sources: dict, items: list, c_n: fx.Node, s_n: fx.Node,
                backward: bool) -> None:
    """The kernel body: ``items`` are (x node, output region, rotate?) of equal shapes; x is copied
    unchanged where rotate is false."""
    P = kb.target.partitions
    if not items:
        raise LoweringError("rotary: no result is used")
    sizes = list(items[0][0].meta["val"].shape)
    if any(list(x.meta["val"].shape) != sizes or list(o.sizes) != sizes for x, o, _ in items):
        raise LoweringError("rotary: inputs of different shapes")
    cr = source_region(kb, sources[c_n]).expand(sizes)
    sr = source_region(kb, sources[s_n]).expand(sizes)
    r, h, outer = axes_plan(sizes, c_n.meta["val"], s_n.meta["val"])
    D = sizes[-1]
    H = sizes[h] if h is not None else 1
    ks = []
    for x_n, out, rot in items:
        xr = source_region(kb, sources[x_n])
        if xr.strides[-1] != 1 or out.strides[-1] != 1 or xr.dtype != out.dtype:
            raise LoweringError("rotary: last axis must be contiguous")
        # heads share a DMA row only where they are adjacent (stride D) in both x and the result
        adjacent = h is not None and xr.strides[h] == D and out.strides[h] == D
        ks.append(_Kernel(kb, xr, out, sizes, r, h, _chunk(H, D) if adjacent else 1, rot))
    kb.plan = (f"rotary {'backward' if backward else 'forward'} of {len(ks)} tensor(s) {sizes} "
               f"({sum(k.rotate for k in ks)} rotated): rows axis {r} in tiles of {P}, {[k.hc for k in ks]} "
               f"of {H} heads (axis {h}) x {D} on the free axis, outer axes {outer}; tables loaded once "
               f"per row tile")
    regs = [cr, sr] + [reg for k in ks for reg in (k.xr, k.out)]

    def nest(i: int, offs: list) -> None:
        if i < len(outer):
            ax = outer[i]
            with maybe_loop(kb, sizes[ax], "affine", "o") as v:
                nest(i + 1, [off + v * reg.strides[ax] for off, reg in zip(offs, regs)])
            return
        with maybe_loop(kb, ceil_div(sizes[r], P), "affine", "r") as ir:
            o = [off + P * ir * reg.strides[r] for off, reg in zip(offs, regs)]
            rows = ragged(sizes[r], P, ir)
            ct, ss = _tables(kb, cr, sr, o[0], o[1], rows, r, D, backward)
            for j, k in enumerate(ks):
                k.row_tile(rows, o[2 + 2 * j], o[3 + 2 * j], ct, ss)

    nest(0, [reg.offset for reg in regs])


def _tables(kb: KernelBuilder, cr, sr, off_c, off_s, rows, r: int, D: int, backward: bool):
    """The row tile of cos and ``ss``, the partner half's factor: forward ``ss[:n] = -sin[:n]``,
    ``ss[n:] = sin[n:]``; backward ``ss[:n] = sin[n:]``, ``ss[n:] = -sin[:n]``."""
    P, half, dt = kb.target.partitions, D // 2, hw_dtype(cr.dtype)
    ct = kb.tile((P, D), dt, prefix="cos")
    st = kb.tile((P, D), dt, prefix="sin")
    kb.dma(ct.region(rows, D), HBMAccess(cr.tensor, off_c, ((cr.strides[r], rows), (1, D))))
    kb.dma(st.region(rows, D), HBMAccess(sr.tensor, off_s, ((sr.strides[r], rows), (1, D))))
    ss = kb.tile((P, D), "float32", prefix="ss")
    neg_at, pos_at = (half, 0) if backward else (0, half)
    kb.tensor_scalar(TileRegion(ss, (0, neg_at), (rows, half)), data=TileRegion(st, (0, 0), (rows, half)),
                     op0=AluOp.multiply, operand0=-1.0)
    kb.copy("gpsimd", TileRegion(ss, (0, pos_at), (rows, half)), TileRegion(st, (0, half), (rows, half)))
    return ct, ss


class _Kernel:
    """The emitter of one tensor of a rotary kernel (its regions and head chunking)."""

    def __init__(self, kb: KernelBuilder, xr, out, sizes, r: int, h: int | None, hc: int,
                 rotate: bool = True) -> None:
        self.kb, self.xr, self.out, self.rotate = kb, xr, out, rotate
        self.sizes, self.r, self.h, self.hc = sizes, r, h, hc
        self.D = sizes[-1]
        self.P = kb.target.partitions
        self.dt = hw_dtype(xr.dtype)

    def _access(self, reg, off, rows) -> HBMAccess:
        # a chunk of several heads is adjacent in memory (the caller checks): one row of hc * D
        return HBMAccess(reg.tensor, off, ((reg.strides[self.r], rows), (1, self.hc * self.D)))

    def row_tile(self, rows, off_x, off_o, ct, ss) -> None:
        """Every head chunk of one tile of token rows."""
        H = self.sizes[self.h] if self.h is not None else 1
        with maybe_loop(self.kb, H // self.hc, "affine", "h") as jh:
            step_x = jh * self.hc * self.xr.strides[self.h] if self.h is not None else 0
            step_o = jh * self.hc * self.out.strides[self.h] if self.h is not None else 0
            self.heads(rows, off_x + step_x, off_o + step_o, ct, ss)

    def heads(self, rows, off_x, off_o, ct, ss) -> None:
        """Load ``hc`` heads of the row tile, rotate each, store them (rounded once)."""
        kb, P, D, W = self.kb, self.P, self.D, self.hc * self.D
        half = D // 2
        xt = kb.tile((P, W), self.dt, prefix="x")
        kb.dma(xt.region(rows, W), self._access(self.xr, off_x, rows))
        if not self.rotate:  # a piece passed through unchanged
            kb.dma(self._access(self.out, off_o, rows), xt.region(rows, W))
            return
        acc = kb.tile((P, W), "float32", prefix="xc")
        pt = kb.tile((P, W), "float32", prefix="pt")
        for j in range(self.hc):
            b = j * D
            kb.tensor_tensor(TileRegion(acc, (0, b), (rows, D)), data1=TileRegion(xt, (0, b), (rows, D)),
                             data2=ct.region(rows, D), op=AluOp.multiply)
            kb.tensor_tensor(TileRegion(pt, (0, b), (rows, half)), data1=TileRegion(xt, (0, b + half), (rows, half)),
                             data2=TileRegion(ss, (0, 0), (rows, half)), op=AluOp.multiply, engine=Engine.gpsimd)
            kb.tensor_tensor(TileRegion(pt, (0, b + half), (rows, half)), data1=TileRegion(xt, (0, b), (rows, half)),
                             data2=TileRegion(ss, (0, half), (rows, half)), op=AluOp.multiply, engine=Engine.gpsimd)
        yt = kb.tile((P, W), self.dt, prefix="y")
        kb.tensor_tensor(yt.region(rows, W), data1=acc.region(rows, W), data2=pt.region(rows, W), op=AluOp.add)
        kb.dma(self._access(self.out, off_o, rows), yt.region(rows, W))
