"""Matmul kernels: ``mm``/``bmm`` on TensorE with the pointwise epilogue fused.

Tile plan (nki.md §6.1): output tiles of 128 rows (the stationary operand's free size) by 512
columns (one PSUM bank of fp32), the contraction axis on partitions in 128-deep steps accumulated in
PSUM. Operands are read through access patterns, so a transposed or permuted operand costs no copy
kernel. The PSUM tile is evicted to SBUF once and the epilogue (bias, activation, residual add, cast)
runs on it before the single store.
"""
from __future__ import annotations

import sympy
import torch
import torch.fx as fx

from ..config import Config
from ..ir import HBMAccess, TileRegion
from .builder import KernelBuilder, TVal, ceil_div
from .fused import PMAX, FusedGroup, Source, _Ctx, _FusedLowering
from .layout import LoweringError, hw_dtype, word_scale
from .registry import register_kernel

aten = torch.ops.aten
NMAX = 512
KMAX = 128


def _operand(kb: KernelBuilder, src: Source, batch_vars, batch_axes_strides, row_ax: int,
             col_ax: int, row0, rows, col0, cols):
    """Access [rows over ``row_ax``, cols over ``col_ax``] of an operand (logical axes)."""
    m = src.meta
    scale = word_scale(src.base_dtype)
    if scale != 1:
        raise LoweringError("integer matmul operands")
    param = kb.param(src.host, src.base_extent, hw_dtype(src.base_dtype))
    off = m.storage_offset + row0 * m.stride[row_ax] + col0 * m.stride[col_ax]
    for v, st in zip(batch_vars, batch_axes_strides):
        off += v * st
    return HBMAccess(param, sympy.expand(off), ((m.stride[row_ax], rows), (m.stride[col_ax], cols)))


def lower_matmul(group: FusedGroup, sources: dict[fx.Node, Source], kb: KernelBuilder,
                 out_tensors: dict, out_meta: dict, cfg: Config) -> None:
    mm = next(n for n in group.nodes if n.target in (aten.mm.default, aten.bmm.default))
    a, b = mm.args[0], mm.args[1]
    if a in group.members or b in group.members:
        raise LoweringError("matmul operands computed in the same kernel")
    sa, sb = sources[a], sources[b]
    if sa.base_dtype != sb.base_dtype or sa.base_dtype not in ("float32", "bfloat16", "float16"):
        raise LoweringError(f"matmul of {sa.base_dtype} x {sb.base_dtype}")
    out_shape = list(mm.meta["val"].shape)
    nb = len(out_shape) - 2
    M, N = out_shape[-2:]
    K = a.meta["val"].shape[-1]
    D = out_shape
    lw = _FusedLowering(FusedGroup(group.nodes, group.outputs, tuple(D)), sources, kb, NMAX)
    lw.out_tensors, lw.out_meta = out_tensors, out_meta
    lw.seeded = {mm}
    lw.plan(merge=False)
    lw.P, lw.F = nb, nb + 1
    lw.p_reduced, lw.accumulate = False, False
    lw.fc_size = lw.fc = min(N, NMAX)
    lw.loop_vars = {}
    lw.ctx = _Ctx(lw)
    in_dt = hw_dtype(sa.base_dtype)
    nm, nn, nk = ceil_div(M, PMAX), ceil_div(N, NMAX), ceil_div(K, KMAX)
    kb.plan = (f"matmul [{'x'.join(map(str, out_shape[:-2])) or '-'}] {M}x{K} @ {K}x{N} ({in_dt}); "
               f"output tiles {PMAX}x{lw.fc} in PSUM, K in {nk} step(s) of {KMAX} accumulated in PSUM; "
               f"epilogue: {len(group.nodes) - 1} fused op(s)")

    def batch_loops(k: int, bvars: list):
        if k < nb:
            with lw._loop(D[k], "affine", "b") as v:
                lw.loop_vars[k] = v
                batch_loops(k + 1, bvars + [v])
            return
        tiles(bvars)

    def bstrides(meta, rank_out: int):
        # batch strides of a bmm operand (broadcast batch dims have stride 0)
        return [meta.stride[i] if meta.size[i] != 1 else 0 for i in range(len(meta.size) - 2)]

    ra, rb = a.meta["val"].dim(), b.meta["val"].dim()
    esz = 2 if in_dt in ("bfloat16", "float16") else 4
    # An operand whose contraction axis is the contiguous one ([M, K] row-major lhs, W^T rhs) cannot
    # be DMAed into the [K, free] layout TensorE needs without one descriptor per element; it is
    # loaded row-contiguously instead and transposed on TensorE through PSUM (nki.md §5.4, §6.5).
    lhs_tr = sa.meta.stride[ra - 1] == 1 and sa.meta.stride[ra - 2] != 1 and M > 1
    rhs_tr = sb.meta.stride[rb - 2] == 1 and sb.meta.stride[rb - 1] != 1 and N > 1
    budget = kb.target.sbuf_bytes_per_partition * 9 // 10
    # PSUM banks left for accumulators: rhs transposes run inside the column loop, lhs ones beside
    # it unless a loop of extent 1 is inlined (K of one tile, or one column step)
    acc_banks = kb.target.psum_banks - (1 if rhs_tr else 0) - (1 if lhs_tr and (nk == 1 or nn <= 2) else 0)

    def sbuf_use(bm: int, ltr: bool, rtr: bool) -> int:
        use = nk * bm * PMAX * esz + (K * esz if ltr else 0)
        use += nk * NMAX * esz + (K * esz if rtr else 0) if rtr else 2 * NMAX * esz
        return use + bm * NMAX * 4 * 2
    # m tiles sharing one rhs load (block of the M dim): as many as divide the tile count and fit
    bm = 1
    for cand in (8, 4, 2, 1):
        if nm % cand == 0 and cand <= acc_banks and sbuf_use(cand, lhs_tr, rhs_tr) <= budget:
            bm = cand
            break
    if sbuf_use(bm, lhs_tr, rhs_tr) > budget:
        lhs_tr = rhs_tr = False  # too deep to stage: strided loads, as before
        bm = 1
    BM = bm * PMAX
    nmb = nm // bm
    # n tiles sharing one rhs DMA: 2 x 512 columns make 2 KiB rows (nki.md §5.4) and, with 4 m
    # tiles, 8 matmuls per k step, enough to hide a DMA's fixed cost; PSUM holds bm * nw groups
    nw = 2 if (not rhs_tr and nn % 2 == 0 and 2 * bm <= acc_banks
               and sbuf_use(bm, lhs_tr, rhs_tr) + 2 * NMAX * esz <= budget) else 1
    kb.plan += (f"; M blocked by {bm} tile(s) with lhs^T hoisted over K"
                f"{' (TensorE transposes)' if lhs_tr else ''}, rhs{' transposed on TensorE' if rhs_tr else ''}"
                f" reused by the block")

    def sub_rows(mt):
        return sympy.Min(PMAX, M - PMAX * mt) if (M % PMAX and nm > 1) else sympy.Integer(min(M, PMAX))

    def krows_of(kk):
        return sympy.Min(KMAX, K - KMAX * kk) if (K % KMAX and nk > 1) else sympy.Integer(min(K, KMAX))

    def transpose_into(dst_tile, dst_col0, stage, nrows, kk, engine="vector"):
        """dst_tile[0:krows, dst_col0 : dst_col0+nrows] = stage[0:nrows, 128kk : 128kk+krows]^T"""
        krows = krows_of(kk)
        tp = kb.tile((KMAX, PMAX), "float32", "psum", prefix="tp")
        kb.instr("tensor", "nc_transpose", tp.region(krows, nrows),
                 {"data": TileRegion(stage, (0, KMAX * kk), (nrows, krows))})
        kb.instr(engine, "tensor_copy", TileRegion(dst_tile, (0, dst_col0), (krows, nrows)),
                 {"src": tp.region(krows, nrows)})
        kb.release(tp)  # a loop of extent 1 is inlined: let the next transpose reuse the bank

    def tiles(bvars):
        with lw._loop(nmb, "affine", "mb") as mb:
            # -- lhs^T of the whole M block, all of K, loaded once
            lhsT = kb.tile((KMAX, nk * BM), in_dt, prefix="lhsT")
            for i in range(bm):
                mt = mb * bm + i
                rows = sub_rows(mt)
                if lhs_tr:
                    stage = kb.tile((PMAX, K), in_dt, prefix="lhs_rows")
                    kb.dma(stage.region(rows, K),
                           _operand(kb, sa, bvars, bstrides(sa.meta, ra), ra - 2, ra - 1,
                                    PMAX * mt, rows, 0, K))
                    with lw._loop(nk, "affine", "kt") as kk:
                        transpose_into(lhsT, kk * BM + i * PMAX, stage, rows, kk)
                    kb.release(stage)
                else:
                    with lw._loop(nk, "affine", "kl") as kk:
                        krows = krows_of(kk)
                        kb.dma(TileRegion(lhsT, (0, kk * BM + i * PMAX), (krows, rows)),
                               _operand(kb, sa, bvars, bstrides(sa.meta, ra), ra - 1, ra - 2,
                                        KMAX * kk, krows, PMAX * mt, rows))
            with lw._loop(nn // nw, "affine", "n") as jn:
                def cols_of(jt):
                    return sympy.Min(NMAX, N - NMAX * jt) if (N % NMAX and nn > 1) else sympy.Integer(min(N, NMAX))
                cols = cols_of(jn) if nw == 1 else (
                    sympy.Min(nw * NMAX, N - nw * NMAX * jn) if N % NMAX else sympy.Integer(nw * NMAX))
                if rhs_tr:  # rhs^T staged for this column tile: all of K, transposed once per block
                    rhsT = kb.tile((KMAX, nk * NMAX), in_dt, prefix="rhsT")
                    for c in range(ceil_div(min(N, NMAX), PMAX)):
                        # a ragged last column tile has empty 128-column sub-blocks: they transpose
                        # one in-bounds row into columns the matmul never reads
                        ncols = sympy.Max(1, sympy.Min(PMAX, cols - PMAX * c))
                        row0 = sympy.Min(NMAX * jn + PMAX * c, N - 1)
                        stage = kb.tile((PMAX, K), in_dt, prefix="rhs_rows")
                        kb.dma(stage.region(ncols, K),
                               _operand(kb, sb, bvars, bstrides(sb.meta, rb), rb - 1, rb - 2,
                                        row0, ncols, 0, K))
                        with lw._loop(nk, "affine", "kr") as kk:
                            transpose_into(rhsT, kk * NMAX + PMAX * c, stage, ncols, kk, "scalar")
                        kb.release(stage)
                accs = [kb.tile((PMAX, lw.fc), "float32", "psum", prefix="acc") for _ in range(bm * nw)]
                with lw._loop(nk, "affine", "k") as kk:
                    krows = krows_of(kk)
                    if rhs_tr:
                        rhs_r = TileRegion(rhsT, (0, kk * NMAX), (krows, cols))
                    else:
                        rhs_t = kb.tile((KMAX, nw * lw.fc), in_dt, prefix="rhs")
                        rhs_r = rhs_t.region(krows, cols)
                        kb.dma(rhs_r, _operand(kb, sb, bvars, bstrides(sb.meta, rb), rb - 2, rb - 1,
                                               KMAX * kk, krows, nw * NMAX * jn, cols))
                    for i in range(bm):
                        rows = sub_rows(mb * bm + i)
                        for w in range(nw):
                            cw = cols if nw == 1 else cols_of(jn * nw + w)
                            kb.instr("tensor", "nc_matmul", accs[i * nw + w].region(rows, cw),
                                     {"stationary": TileRegion(lhsT, (0, kk * BM + i * PMAX), (krows, rows)),
                                      "moving": TileRegion(rhs_r.tile, (0, rhs_r.starts[1] + w * NMAX), (krows, cw))},
                                     accumulate=(sympy.Gt(kk, 0) if nk > 1 else False))
                for i in range(bm):
                    for w in range(nw):
                        lw.ip = mb * bm + i
                        lw.rows = rows = sub_rows(mb * bm + i)
                        lw.fcv = jn * nw + w
                        lw.cols = cw = cols if nw == 1 else cols_of(jn * nw + w)
                        res = kb.tile((PMAX, lw.fc), "float32", prefix="res")
                        resr = res.region(rows, cw)
                        kb.instr("vector", "tensor_copy", resr, {"src": accs[i * nw + w].region(rows, cw)})
                        lw.vals = {mm: TVal("full", resr)}
                        lw._eval(accs={})

    batch_loops(0, [])


@register_kernel(aten.mm.default, aten.bmm.default)
def _matmul_group_only(*args, **kwargs):  # pragma: no cover - matmuls are lowered as groups
    raise LoweringError("matmul is lowered through its group")
