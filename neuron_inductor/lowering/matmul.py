"""Matmul kernels: ``mm``/``bmm`` on TensorE with the pointwise epilogue fused.

Tile plan (docs/hardware.md, "Matmul tiling"): output tiles of 128 rows (the stationary operand's free size) by 512
columns (one PSUM bank of fp32), the contraction axis on partitions in 128-deep steps accumulated in
PSUM. Operands are read through access patterns, so a transposed or permuted operand costs no copy
kernel. The PSUM tile is evicted to SBUF once and the epilogue (bias, activation, residual add, cast)
runs on it before the single store.
"""
from __future__ import annotations

from dataclasses import replace

import sympy
import torch
import torch.fx as fx

from ..config import Config
from ..ir import HBMAccess, TileRegion
from .builder import KernelBuilder, TVal, ceil_div
from .fused import FusedEmitter, FusedGroup, Source
from . import matmul_epilogue as epi_hoist
from . import matmul_kstream as kstream
from .matmul_skinny import lower_skinny
from .fused_tiling import plan_tiles
from .layout import LoweringError, hw_dtype, word_scale
from .loops import maybe_loop, ragged
from .registry import VIEWS, KernelContext, register_lowering
from .transpose import tensor_transpose, tensor_transpose_exact

aten = torch.ops.aten


def operand_access(kb: KernelBuilder, src: Source, batch_vars, batch_axes_strides, row_ax: int,
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


def block_sizes(nm: int, cap: int) -> list[int]:
    """M block heights (in row tiles) worth trying, tallest first: the smallest block for each
    number of passes over the rhs (ceil(nm / passes)), at most ``cap``. A tall operand is re-read
    once per block, so 16 row tiles in blocks of 6 (6 + 6 + 4) read it 3 times, where powers of two
    that fit only as 4 would read it 4 times."""
    out: list[int] = []
    for passes in range(1, max(nm, 1) + 1):
        b = ceil_div(max(nm, 1), passes)
        if b <= cap and b not in out:
            out.append(b)
    return out


def lower_matmul(group: FusedGroup, sources: dict[fx.Node, Source], kb: KernelBuilder,
                 out_tensors: dict, out_meta: dict, cfg: Config) -> None:
    mm = next(n for n in group.nodes if n.target in (aten.mm.default, aten.bmm.default))
    PMAX, KMAX, NMAX = kb.target.partitions, kb.target.matmul_k_max, kb.target.matmul_n_max
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
    # the epilogue walks the output's own axes: rows on partitions, columns on the free axis
    tp = plan_tiles(FusedGroup(group.nodes, group.outputs, tuple(D)), sources, kb.target, NMAX,
                    seeded=frozenset({mm}), merge=False)
    lw = FusedEmitter(replace(tp, P=nb, F=nb + 1, fc=min(N, NMAX)), sources, kb, out_tensors, out_meta)
    in_dt = hw_dtype(sa.base_dtype)
    nm, nn, nk = ceil_div(M, PMAX), ceil_div(N, NMAX), ceil_div(K, KMAX)
    kb.plan = (f"matmul [{'x'.join(map(str, out_shape[:-2])) or '-'}] {M}x{K} @ {K}x{N} ({in_dt}); "
               f"output tiles {PMAX}x{lw.tp.fc} in PSUM, K in {nk} step(s) of {KMAX} accumulated in PSUM; "
               f"epilogue: {len(group.nodes) - 1} fused op(s)")

    def batch_loops(k: int, bvars: list):
        if k < nb:
            with maybe_loop(kb, D[k], "affine", "b") as v:
                lw.at.loop_vars[k] = v
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
    # loaded row-contiguously instead and transposed on TensorE through PSUM (docs/hardware.md: DMA, matmul tiling).
    lhs_tr = sa.meta.stride[ra - 1] == 1 and sa.meta.stride[ra - 2] != 1 and M > 1
    rhs_tr = sb.meta.stride[rb - 2] == 1 and sb.meta.stride[rb - 1] != 1 and N > 1
    budget = kb.target.sbuf_bytes_per_partition * 19 // 20
    # row-invariant epilogue operands, read once into tiles the whole kernel keeps (the K-streamed
    # plan keeps them per column block instead): the tile plans get the SBUF that is left
    invariant = epi_hoist.row_invariant(lw)
    whole = epi_hoist.sbuf_bytes(lw, invariant, N) if epi_hoist.worth_hoisting(kb, lw, invariant, N) else 0
    hoisted: dict = {}
    full_budget, budget = budget, budget - whole
    # rows staged for TensorE transposes are whole K rows (one contiguous DMA row per partition)
    KC = K
    # transposes gathered per PSUM bank (one eviction of 512 columns instead of four of 128)
    grp = next((g for g in (4, 2) if K % KMAX == 0 and nk % g == 0), 1)

    # bytes per output column of one evicted tile and the tiles its fused epilogue allocates
    # (views allocate nothing: they only re-index the evicted tile)
    n_epi = sum(1 for n in group.nodes if n is not mm and n.target not in VIEWS)
    epi = 4 * (1 + 2 * n_epi)

    def sbuf_use(bm: int, cw: int, rtr: bool) -> int:
        """Peak SBUF bytes per partition: the lhs^T block plus the larger of its staging (an inner
        loop of its own) and the column loop's tiles."""
        lhs = nk * bm * PMAX * esz
        stage = KC * esz if lhs_tr else 0
        if rtr:  # one evicted tile (and its epilogue's tiles) live per inner row step
            cols = nk * cw * esz + (cw // PMAX) * KC * esz + 2 * epi * cw
        else:    # row tiles are evicted in an unrolled sequence; each eviction's tiles return to
            # the builder's pool before the next, so one eviction's worth is live at a time
            cols = 2 * NMAX * esz + 2 * epi * NMAX
        return lhs + max(stage, cols)
    if rhs_tr:
        # W^T (nn.Linear): transposed once per (M block, column tile) and reused by every row tile of
        # the block, so the block is as tall as SBUF allows (transpose work ~ 128 / rows of block);
        # row tiles are an inner loop holding one PSUM bank each, so several accumulate in flight
        plans = [(bm, cw) for bm in block_sizes(nm, 16) for cw in (512, 256, 128)
                 if cw <= max(PMAX, ceil_div(N, PMAX) * PMAX)]
        fit = [pc for pc in plans if sbuf_use(pc[0], pc[1], True) <= budget]
        if fit:
            bm, CW = fit[0]
        else:
            rhs_tr, bm, CW = False, 1, NMAX
    rhs_res = False
    if not rhs_tr:
        CW = NMAX
        # the lhs transposes' PSUM bank belongs to the same block body as the accumulators: the
        # verifier counts every PSUM tile of an affine body as live at once (blocks overlap), so a
        # TensorE-transposed lhs leaves one bank fewer for accumulators
        acc_banks = kb.target.psum_banks - (1 if lhs_tr else 0)
        bm = 1
        for cand in block_sizes(nm, acc_banks):
            if sbuf_use(cand, CW, False) <= budget:
                bm = cand
                break
    if sbuf_use(bm, CW, rhs_tr) > budget:
        lhs_tr = rhs_tr = False  # too deep to stage: strided loads, as before
        bm, CW = 1, NMAX
    if not rhs_tr and lhs_tr == (sa.meta.stride[ra - 1] == 1 and sa.meta.stride[ra - 2] != 1 and M > 1):
        # a K x 512 rhs column tile resident in SBUF lets row tiles run as an inner loop with one
        # PSUM bank each (several accumulation groups in flight) when the M block stays as tall
        for cand in block_sizes(nm, 32):
            if cand >= bm and \
                    sbuf_use(cand, NMAX, True) - (NMAX // PMAX) * KC * esz <= budget:
                bm, rhs_res = cand, True
                break
    # n tiles sharing one rhs DMA: 2 x 512 columns make 2 KiB rows (docs/hardware.md, "DMA") and, with 4 m
    # tiles, 8 matmuls per k step, enough to hide a DMA's fixed cost; PSUM holds bm * nw groups
    nw = 2 if (not rhs_tr and nn % 2 == 0 and 2 * bm + (1 if lhs_tr else 0) <= kb.target.psum_banks
               and sbuf_use(bm, CW, False) + 2 * NMAX * esz <= budget) else 1
    if rhs_tr or rhs_res:
        lw.tp = replace(lw.tp, fc=min(N, CW))
    kb.plan += (f"; M blocked by {bm} tile(s) with lhs^T hoisted over K"
                f"{' (TensorE transposes)' if lhs_tr else ''}, rhs{' transposed on TensorE' if rhs_tr else ''}"
                f" reused by the block" + (f" in {CW}-column tiles, row tiles looped inside" if rhs_tr else ""))

    if nb == 0 and _kstream(kb, lw, mm, sa, sb, ra, rb, M, N, K, in_dt, esz, bm, full_budget,
                            2 * epi * NMAX, invariant, whole):
        return
    if whole:
        hoisted = epi_hoist.load(kb, lw, invariant, N)
        kb.plan += f"; {len(hoisted)} row-invariant epilogue operand(s) loaded once"

    def sub_rows(mt):
        return ragged(M, PMAX, mt)

    def krows_of(kk):
        return ragged(K, KMAX, kk)

    def lhs_col(i, kk, nb: int):
        # lhs^T block layout of a block of nb row tiles. TensorE-transposed: row tile i, k tile kk ->
        # columns [(i*nk + kk)*128, +128) (one PSUM bank gathers consecutive k tiles of a row tile).
        # Loaded directly: [(kk*nb + i)*128, +128), so one DMA per k tile fills the whole block with
        # nb*128 contiguous elements per partition instead of nb descriptors of 128.
        return (i * nk + kk) * PMAX if lhs_tr else (kk * nb + i) * PMAX

    def stage_rows(stages: list, src: Source, bvars, rank: int, row_ax: int, col_ax: int,
                   row_specs: list, q0: int, qn: int) -> None:
        """DMA rows [row0, +nrows) x k columns of chunk (q0, qn) into the stage tiles."""
        kcols = min(K - KMAX * q0, KMAX * qn)
        for st, (row0, nrows) in zip(stages, row_specs):
            kb.dma(st.region(nrows, kcols),
                   operand_access(kb, src, bvars, bstrides(src.meta, rank), row_ax, col_ax,
                            row0, nrows, KMAX * q0, kcols))

    def transpose_chunk(stages: list, nrows_of: list, q0: int, qn: int, dst, dst_col, per: int,
                        engine: str) -> None:
        """dst[0:krows, dst_col(kk) + ...] = transposes of the stage tiles' k tiles q0..q0+qn.
        ``per`` k tiles of one stage, or one k tile of every stage, share one PSUM bank and one
        eviction."""
        nblk = per * len(stages)
        exact_blocks = not tensor_transpose_exact(kb.target, in_dt)
        with maybe_loop(kb, qn // per, "affine", "kt") as kg:
            kk0 = q0 + kg * per
            krows = krows_of(kk0)
            if exact_blocks:  # trn1: VectorE blocks straight into SBUF, no PSUM round trip
                for u in range(per):
                    for c, (st, nrows) in enumerate(zip(stages, nrows_of)):
                        tensor_transpose(kb, TileRegion(dst, (0, dst_col(kk0) + (u * len(stages) + c) * PMAX),
                                                        (krows, nrows)),
                                         TileRegion(st, (0, KMAX * (kg * per + u)), (nrows, krows)))
            else:
                # a TensorE transpose writes the input's dtype ("dst must have the same data type as
                # data"); the eviction below is a same-dtype copy
                tp = kb.tile((KMAX, nblk * PMAX), in_dt, "psum", prefix="tp")
                for u in range(per):
                    for c, (st, nrows) in enumerate(zip(stages, nrows_of)):
                        tensor_transpose(kb, TileRegion(tp, (0, (u * len(stages) + c) * PMAX), (krows, nrows)),
                                         TileRegion(st, (0, KMAX * (kg * per + u)), (nrows, krows)))
                width = nblk * PMAX if len(stages) == 1 or nrows_of[-1] == PMAX else \
                    (nblk - 1) * PMAX + nrows_of[-1]
                kb.copy(engine, TileRegion(dst, (0, dst_col(kk0)), (krows, width)), tp.region(krows, width))
                kb.release(tp)

    def load_lhsT(lhsT, m0, nb: int, bvars) -> None:
        if lhs_tr:
            with maybe_loop(kb, nb, "affine", "li") as i:
                mt = m0 + i
                rows = sub_rows(mt)
                st = kb.tile((PMAX, KC), in_dt, prefix="lhs_rows")
                stage_rows([st], sa, bvars, ra, ra - 2, ra - 1, [(PMAX * mt, rows)], 0, nk)
                transpose_chunk([st], [rows], 0, nk, lhsT, lambda kk: lhs_col(i, kk, nb), grp, "vector")
            return
        # the block's rows [m0*128, +width) of every k row in one DMA per k tile
        width = sympy.Min(nb * PMAX, M - PMAX * m0) if M % PMAX else sympy.Integer(nb * PMAX)
        with maybe_loop(kb, nk, "affine", "kl") as kk:
            krows = krows_of(kk)
            kb.dma(TileRegion(lhsT, (0, lhs_col(0, kk, nb)), (krows, width)),
                   operand_access(kb, sa, bvars, bstrides(sa.meta, ra), ra - 1, ra - 2,
                            KMAX * kk, krows, PMAX * m0, width))

    def evict(acc, mt, rows, fcv, cw) -> None:
        lw.at.ip = mt
        lw.at.rows = rows
        lw.at.fcv = fcv
        lw.at.cols = cw
        res = kb.tile((PMAX, lw.tp.fc), "float32", prefix="res")
        resr = res.region(rows, cw)
        kb.copy("vector", resr, acc.region(rows, cw))
        lw.vals = {mm: TVal("full", resr)}
        epi_hoist.bind(lw, hoisted)
        lw.eval(accs={})

    def columns_resident(lhsT, m0, nb: int, bvars, direct: bool) -> None:
        ncw = ceil_div(N, CW)
        nsub = CW // PMAX
        with maybe_loop(kb, ncw, "affine", "n") as jn:
            cols = ragged(N, CW, jn)
            rhsT = kb.tile((KMAX, nk * CW), in_dt, prefix="rhsT")
            # a ragged last column tile has empty 128-column sub-blocks: they transpose one
            # in-bounds row into columns the matmul never reads
            subs = [(sympy.Min(CW * jn + PMAX * c, N - 1), sympy.Max(1, sympy.Min(PMAX, cols - PMAX * c)))
                    for c in range(min(nsub, ceil_div(N, PMAX)))]
            if direct:  # rhs columns already K-major: one DMA per k tile, reused by every row tile
                # spread over several DMA queues: one queue issues one transfer per fixed cost
                nq = next(d for d in (4, 2, 1) if nk % d == 0)
                for qd in range(nq):
                    with maybe_loop(kb, nk // nq, "affine", "kr") as kr:
                        kk = kr * nq + qd
                        kb.dma(TileRegion(rhsT, (0, kk * CW), (krows_of(kk), cols)),
                               operand_access(kb, sb, bvars, bstrides(sb.meta, rb), rb - 2, rb - 1,
                                        KMAX * kk, krows_of(kk), CW * jn, cols))
            else:
                sts = [kb.tile((PMAX, KC), in_dt, prefix="rhs_rows") for _ in subs]
                stage_rows(sts, sb, bvars, rb, rb - 1, rb - 2, subs, 0, nk)
                transpose_chunk(sts, [n for _, n in subs], 0, nk, rhsT, lambda kk: kk * CW, 1, "scalar")
            with maybe_loop(kb, nb, "affine", "mi") as i:
                mt = m0 + i
                rows = sub_rows(mt)
                acc = kb.tile((PMAX, lw.tp.fc), "float32", "psum", prefix="acc")
                with maybe_loop(kb, nk, "affine", "k") as kk:
                    krows = krows_of(kk)
                    kb.nc_matmul(acc.region(rows, cols),
                                 stationary=TileRegion(lhsT, (0, lhs_col(i, kk, nb)), (krows, rows)),
                                 moving=TileRegion(rhsT, (0, kk * CW), (krows, cols)),
                                 accumulate=sympy.Gt(kk, 0) if nk > 1 else False)
                evict(acc, mt, rows, jn, cols)

    def tiles(bvars):
        # blocks of bm row tiles, then one ragged block of the rest: a tile count with no good
        # divisor (86 = 2 x 43 for 11008 rows) keeps tall blocks and so few passes over the rhs
        full, tail = divmod(nm, bm)
        if full:
            with maybe_loop(kb, full, "affine", "mb") as mb:
                block(bvars, mb * bm, bm)
        if tail:  # a scope of its own, so its tiles are not live beside the full blocks'
            with kb.loop(1, "affine", "mt"):
                block(bvars, sympy.Integer(full * bm), tail)

    def block(bvars, m0, nb: int):
        """Row tiles [m0, m0 + nb): the lhs^T of the block, all of K, loaded once; every column
        tile of the output."""
        lhsT = kb.tile((KMAX, nk * nb * PMAX), in_dt, prefix="lhsT")
        load_lhsT(lhsT, m0, nb, bvars)
        if rhs_tr or rhs_res:
            columns_resident(lhsT, m0, nb, bvars, direct=not rhs_tr)
            return
        with maybe_loop(kb, nn // nw, "affine", "n") as jn:
            def cols_of(jt):
                return ragged(N, NMAX, jt)
            cols = cols_of(jn) if nw == 1 else (
                sympy.Min(nw * NMAX, N - nw * NMAX * jn) if N % NMAX else sympy.Integer(nw * NMAX))
            accs = [kb.tile((PMAX, lw.tp.fc), "float32", "psum", prefix="acc") for _ in range(nb * nw)]
            with maybe_loop(kb, nk, "affine", "k") as kk:
                krows = krows_of(kk)
                rhs_t = kb.tile((KMAX, nw * lw.tp.fc), in_dt, prefix="rhs")
                rhs_r = rhs_t.region(krows, cols)
                kb.dma(rhs_r, operand_access(kb, sb, bvars, bstrides(sb.meta, rb), rb - 2, rb - 1,
                                       KMAX * kk, krows, nw * NMAX * jn, cols))
                for i in range(nb):
                    rows = sub_rows(m0 + i)
                    for w in range(nw):
                        cw = cols if nw == 1 else cols_of(jn * nw + w)
                        kb.nc_matmul(accs[i * nw + w].region(rows, cw),
                                     stationary=TileRegion(lhsT, (0, lhs_col(i, kk, nb)), (krows, rows)),
                                     moving=TileRegion(rhs_t, (0, w * NMAX), (krows, cw)),
                                     accumulate=sympy.Gt(kk, 0) if nk > 1 else False)
            for i in range(nb):
                for w in range(nw):
                    evict(accs[i * nw + w], m0 + i, sub_rows(m0 + i), jn * nw + w,
                          cols if nw == 1 else cols_of(jn * nw + w))

    batch_loops(0, [])


def _kstream(kb: KernelBuilder, lw: FusedEmitter, mm: fx.Node, sa: Source, sb: Source, ra: int, rb: int,
             M: int, N: int, K: int, in_dt: str, esz: int, bm: int, budget: int, epi: int,
             invariant: dict, whole: int) -> bool:
    """Emit the K-streamed plan (``matmul_kstream``) when it moves fewer bytes than the resident-lhs
    plan with M blocks of ``bm`` row tiles; False leaves the kernel to that plan. The epilogue's
    row-invariant operands (``invariant``) are loaded once per column block, or once for the kernel
    (``whole`` SBUF bytes per partition) with the whole rhs resident."""
    lhs_tr = sa.meta.stride[ra - 1] == 1 and sa.meta.stride[ra - 2] != 1
    rhs_tr = sb.meta.stride[rb - 2] == 1 and sb.meta.stride[rb - 1] != 1
    resident = esz * (M * K + ceil_div(ceil_div(M, kb.target.partitions), bm) * K * N)
    per_block = invariant and epi_hoist.worth_hoisting(kb, lw, invariant, max(kstream.WIDTHS))
    col_bytes = epi_hoist.sbuf_bytes(lw, invariant, 1) if per_block else 0
    p = kstream.plan(M, N, K, esz, lhs_tr, rhs_tr, budget, epi, resident, col_bytes)
    whole_rhs = p is None and not lhs_tr and not rhs_tr and \
        kstream.prefer_rhs_resident(M, N, K, esz, budget, epi + whole, resident)
    if p is None and not whole_rhs:
        return False
    if whole_rhs:
        kb.plan += f"; the whole rhs resident in SBUF, lhs^T streamed once in blocks of {kstream.RES_BLOCK} row tiles"
    else:
        kb.plan += (f"; K streamed in chunks of {p.kc} k tiles into fp32 SBUF accumulators of every row tile "
                    f"x {p.nb} columns (rhs read once, lhs {ceil_div(N, p.nb)}x"
                    f"{', TensorE transposes' if lhs_tr or rhs_tr else ''})")
    lw.tp = replace(lw.tp, fc=min(N, kb.target.matmul_n_max))

    def lhs_access(row0, rows, k0, kcols, transposed=False):
        if transposed:
            return operand_access(kb, sa, [], [], ra - 1, ra - 2, k0, kcols, row0, rows)
        return operand_access(kb, sa, [], [], ra - 2, ra - 1, row0, rows, k0, kcols)

    def rhs_access(k0, krows, col0, cols, transposed=False):
        if transposed:
            return operand_access(kb, sb, [], [], rb - 1, rb - 2, col0, cols, k0, krows)
        return operand_access(kb, sb, [], [], rb - 2, rb - 1, k0, krows, col0, cols)

    hoisted: dict = {}
    base = [sympy.Integer(0)]  # output column of the hoisted tiles' first column

    def prologue(col0, ncols: int) -> None:
        hoisted.update(epi_hoist.load(kb, lw, invariant, ncols, col0))
        base[0] = col0

    def epilogue(region: TileRegion, i, fcv) -> None:
        lw.at.ip, lw.at.rows = i, sympy.Integer(kb.target.partitions)
        lw.at.fcv, lw.at.cols = fcv, sympy.Integer(lw.tp.fc)
        lw.vals = {mm: TVal("full", region)}
        epi_hoist.bind(lw, hoisted, base[0])
        lw.eval(accs={})

    def evict(ps, i, fcv) -> None:
        res = kb.tile((kb.target.partitions, lw.tp.fc), "float32", prefix="res")
        kb.copy("vector", res.region(kb.target.partitions, lw.tp.fc), ps.region(kb.target.partitions, lw.tp.fc))
        epilogue(res.region(kb.target.partitions, lw.tp.fc), i, fcv)

    if whole_rhs:
        if whole:
            prologue(sympy.Integer(0), N)
        kstream.emit_rhs_resident(kb, M, N, K, in_dt, lhs_access, rhs_access, evict)
    else:
        kstream.emit(kb, p, M, N, K, in_dt, lhs_tr, rhs_tr, lhs_access, rhs_access, epilogue,
                     prologue if per_block else None)
    if hoisted:
        kb.plan += f"; {len(hoisted)} row-invariant epilogue operand(s) loaded once per column block"
    return True


@register_lowering(aten.mm.default, aten.bmm.default, kind="kernel", epilogue=True)
def lower_mm(ctx: KernelContext, *args) -> None:
    """mm / bmm and the pointwise epilogue the partitioner fused after it (``ctx.group.nodes``);
    skinny ones (at most 8 rows per batch entry: decode GEMVs) have a plan of their own."""
    if lower_skinny(ctx.group, dict(ctx.sources), ctx.builder, dict(ctx.outputs), dict(ctx.out_meta), ctx.config):
        return
    lower_matmul(ctx.group, dict(ctx.sources), ctx.builder, dict(ctx.outputs), dict(ctx.out_meta), ctx.config)
