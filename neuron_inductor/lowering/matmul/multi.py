"""Sibling GEMMs with one output domain in one kernel, their shared epilogue applied to all of them.

A SwiGLU's gate and up projections (``silu(h Wg^T) * (h Wu^T)``) and the two input-gradient GEMMs of
its backward (``dg Wg + du Wu``) are GEMMs whose results meet in one pointwise epilogue. The
partitioner (``graph/epilogue_absorb.py``) hands them here as one group with several ``mm`` anchors;
each output tile of every GEMM is accumulated in a PSUM bank of its own and evicted, and the epilogue
runs on the evicted tiles together, so neither GEMM's result round-trips through HBM before it.

Tile plan: the partitioner only merges GEMMs whose output rows fit one PSUM bank (N <= 512 fp32
columns), so every rhs is loaded once per kernel (all of K, contraction on partitions; ``W^T``
operands are loaded row-contiguously and transposed on TensorE) and stays resident; row tiles of 128
are an affine loop, each loading its lhs^T (row-contiguous rows transposed on TensorE when K is the
contiguous axis) and accumulating K in 128-deep steps (docs/hardware.md, "Matmul tiling"). Several accumulators are live at
once, one PSUM bank each.
"""
from __future__ import annotations

from dataclasses import replace

import sympy
import torch
import torch.fx as fx

from ...config import Config
from ...ir import TileRegion
from ..builder import KernelBuilder, TVal, ceil_div
from ..fused.emitter import FusedEmitter
from ..fused.group import FusedGroup, Source
from ..fused.tiling import plan_tiles
from ..layout import LoweringError, hw_dtype
from ..loops import maybe_loop, ragged
from .operands import batch_strides, operand_access
from ..registry import KernelContext, register_lowering
from ..transpose import tensor_transpose

aten = torch.ops.aten


def mm_anchors(group: FusedGroup) -> list[fx.Node]:
    """The group's ``mm`` / ``bmm`` nodes, in graph order."""
    return [n for n in group.nodes if n.target in (aten.mm.default, aten.bmm.default)]


def _transposed(kb: KernelBuilder, stage, nrows, K: int, dst, dst_col, in_dt: str, engine: str) -> None:
    """dst[0:krows, dst_col(kk) + 0:nrows] = stage[0:nrows, k tile kk]^T for every k tile (TensorE
    transposes through PSUM; a transpose writes its input's dtype)."""
    KMAX = kb.target.matmul_k_max
    with maybe_loop(kb, ceil_div(K, KMAX), "affine", "kt") as kk:
        krows = ragged(K, KMAX, kk)
        tp = kb.tile((KMAX, kb.target.partitions), in_dt, "psum", prefix="tp")
        tensor_transpose(kb, TileRegion(tp, (0, 0), (krows, nrows)), TileRegion(stage, (0, KMAX * kk), (nrows, krows)))
        kb.copy(engine, TileRegion(dst, (0, dst_col(kk)), (krows, nrows)), tp.region(krows, nrows))
        kb.release(tp)


def lower_matmul_multi(group: FusedGroup, sources: dict[fx.Node, Source], kb: KernelBuilder,
                       out_tensors: dict, out_meta: dict, cfg: Config) -> None:
    mms = mm_anchors(group)
    PMAX, KMAX, NMAX = kb.target.partitions, kb.target.matmul_k_max, kb.target.matmul_n_max
    shapes = {tuple(m.meta["val"].shape) for m in mms}
    if len(shapes) != 1 or any(m.target is not aten.mm.default for m in mms):
        raise LoweringError("sibling GEMMs of different output shapes (or batched)")
    M, N = next(iter(shapes))
    if group.reduce_axes or group.col_axes:
        raise LoweringError("sibling GEMMs with reductions in their epilogue")
    if N > NMAX:
        raise LoweringError(f"sibling GEMMs of {N} columns (more than one PSUM bank)")
    dts = set()
    for m in mms:
        a, b = m.args[0], m.args[1]
        if a in group.members or b in group.members:
            raise LoweringError("matmul operands computed in the same kernel")
        dts |= {sources[a].base_dtype, sources[b].base_dtype}
    if len(dts) != 1 or next(iter(dts)) not in ("float32", "bfloat16", "float16"):
        raise LoweringError(f"sibling matmuls of {sorted(dts)}")
    in_dt = hw_dtype(next(iter(dts)))
    esz = 2 if in_dt in ("bfloat16", "float16") else 4
    Ks = [m.args[0].meta["val"].shape[-1] for m in mms]
    nks = [ceil_div(K, KMAX) for K in Ks]
    # resident rhs, a staged lhs row tile and its lhs^T, one fp32 result per GEMM, the epilogue
    n_epi = len(group.nodes) - len(mms)
    need = sum(nk * N * esz + K * esz + nk * PMAX * esz + 4 * N for nk, K in zip(nks, Ks)) + \
        max(K * esz for K in Ks) + 8 * N * (1 + n_epi)
    if need > kb.target.sbuf_bytes_per_partition * 3 // 4 or len(mms) > kb.target.psum_banks // 2:
        raise LoweringError(f"sibling GEMMs need {need} SBUF bytes per partition")
    tp = plan_tiles(FusedGroup(group.nodes, group.outputs, (M, N)), sources, kb.target, NMAX,
                    seeded=frozenset(mms), merge=False)
    lw = FusedEmitter(replace(tp, P=0, F=1, fc=N), sources, kb, out_tensors, out_meta)
    kb.plan = (f"{len(mms)} sibling matmuls {M}x{N} (K = {', '.join(map(str, Ks))}, {in_dt}) sharing "
               f"one epilogue of {n_epi} op(s); every rhs resident, row tiles of {PMAX} looped, one "
               f"PSUM bank per GEMM")

    rhsT = [load_rhs(kb, sources[m.args[1]], K, N, in_dt) for m, K in zip(mms, Ks)]
    with maybe_loop(kb, ceil_div(M, PMAX), "affine", "mt") as mt:
        rows = ragged(M, PMAX, mt)
        vals = {m: gemm_rows(kb, sources[m.args[0]], rt, K, N, PMAX * mt, rows, M, in_dt)
                for m, K, rt in zip(mms, Ks, rhsT)}
        lw.at.ip, lw.at.rows, lw.at.fcv, lw.at.cols = mt, rows, sympy.Integer(0), sympy.Integer(N)
        lw.vals = vals
        lw.eval(accs={})


def _row_major(src: Source, row_ax: int) -> bool:
    """The operand's contraction axis is the contiguous one: rows are DMAed whole and transposed on
    TensorE instead of read one element per descriptor (``row_ax``: 0 or 1 of the last two axes)."""
    st = src.meta.stride[-2:]
    return st[1 - row_ax] == 1 and st[row_ax] != 1


def _access(kb: KernelBuilder, src: Source, bvars, row_ax: int, col_ax: int, row0, rows, col0, cols):
    """``operand_access`` of a [.., R, C] operand's last two axes, batch entry ``bvars`` (one
    variable or index per leading axis) of a batched one."""
    nb = len(src.meta.size) - 2
    bst = batch_strides(src.meta) if nb else []
    return operand_access(kb, src, list(bvars), bst, nb + row_ax, nb + col_ax, row0, rows, col0, cols)


def load_rhs(kb: KernelBuilder, sb: Source, K: int, N: int, in_dt: str, bvars=()):
    """The whole rhs [K, N] (of batch entry ``bvars`` of a batched one) resident in SBUF as
    [128, k tiles x N] (contraction on partitions)."""
    KMAX, PMAX = kb.target.matmul_k_max, kb.target.partitions
    nk = ceil_div(K, KMAX)
    t = kb.tile((KMAX, nk * N), in_dt, prefix="rhsT")
    if _row_major(sb, 1) and N > 1:  # W^T of an nn.Linear: rows of W, transposed
        for c in range(ceil_div(N, PMAX)):
            nrows = min(PMAX, N - PMAX * c)
            st = kb.tile((PMAX, K), in_dt, prefix="rhs_rows")
            kb.dma(st.region(nrows, K), _access(kb, sb, bvars, 1, 0, PMAX * c, nrows, 0, K))
            _transposed(kb, st, nrows, K, t, lambda kk, c=c: kk * N + PMAX * c, in_dt, "scalar")
            kb.release(st)
    else:
        with maybe_loop(kb, nk, "affine", "kr") as kk:
            krows = ragged(K, KMAX, kk)
            kb.dma(TileRegion(t, (0, kk * N), (krows, N)),
                   _access(kb, sb, bvars, 0, 1, KMAX * kk, krows, 0, N))
    return t


def gemm_rows(kb: KernelBuilder, sa: Source, rhsT, K: int, N: int, row0, rows, M: int,
              in_dt: str, bvars=(), evict: str = "vector") -> TVal:
    """Rows [row0, +rows) of lhs @ rhs (rhs resident, see :func:`load_rhs`; batch entry ``bvars``
    of a batched lhs), accumulated over K in PSUM, one bank per 512 columns (each bank's block
    evicted on ``evict`` as soon as its K steps are done, so a bank is reused by the next block),
    into an fp32 SBUF tile."""
    KMAX, PMAX, NMAX = kb.target.matmul_k_max, kb.target.partitions, kb.target.matmul_n_max
    nk = ceil_div(K, KMAX)
    lhsT = kb.tile((KMAX, nk * PMAX), in_dt, prefix="lhsT")
    if _row_major(sa, 0) and M > 1:
        st = kb.tile((PMAX, K), in_dt, prefix="lhs_rows")
        kb.dma(st.region(rows, K), _access(kb, sa, bvars, 0, 1, row0, rows, 0, K))
        _transposed(kb, st, rows, K, lhsT, lambda kk: kk * PMAX, in_dt, "vector")
    else:
        with maybe_loop(kb, nk, "affine", "kl") as kk:
            krows = ragged(K, KMAX, kk)
            kb.dma(TileRegion(lhsT, (0, kk * PMAX), (krows, rows)),
                   _access(kb, sa, bvars, 1, 0, KMAX * kk, krows, row0, rows))
    res = kb.tile((PMAX, N), "float32", prefix="res")
    with maybe_loop(kb, ceil_div(N, NMAX), "affine", "nb") as nj:
        cw = ragged(N, NMAX, nj)
        acc = kb.tile((PMAX, min(N, NMAX)), "float32", "psum", prefix="acc")
        with maybe_loop(kb, nk, "affine", "k") as kk:
            krows = ragged(K, KMAX, kk)
            kb.nc_matmul(acc.region(rows, cw), stationary=TileRegion(lhsT, (0, kk * PMAX), (krows, rows)),
                         moving=TileRegion(rhsT, (0, kk * N + NMAX * nj), (krows, cw)),
                         accumulate=sympy.Gt(kk, 0) if nk > 1 else False)
        kb.copy(evict, TileRegion(res, (0, NMAX * nj), (rows, cw)), acc.region(rows, cw))
    return TVal("full", res.region(rows, N))


@register_lowering("matmul_multi", kind="group")
def lower_matmul_multi_group(ctx: KernelContext) -> None:
    lower_matmul_multi(ctx.group, ctx.sources, ctx.builder, ctx.outputs, ctx.out_meta, ctx.config)
