"""Emit a GEMM and its epilogue following its :class:`~.plan.GemmPlan` (the resident-lhs plan).

Per M block of row tiles, ``lhs^T`` over all of K is loaded once (TensorE-transposed when the lhs is
row-major); the rhs streams past it one column tile (or two, sharing a DMA) at a time, or, with a
resident rhs column tile, row tiles loop inside each column tile. Each PSUM accumulator is evicted to
SBUF once and the fused epilogue (``FusedEmitter.eval``) runs on it before the single store.
"""
from __future__ import annotations

import sympy
import torch.fx as fx

from ...ir import TileRegion
from ..builder import KernelBuilder, TVal, ceil_div
from ..fused.emitter import FusedEmitter
from ..fused.group import Source
from ..loops import maybe_loop, ragged
from ..transpose import tensor_transpose, tensor_transpose_exact
from . import epilogue as epi_hoist
from .operands import batch_strides, operand_access
from .plan import GemmPlan


class GemmEmitter:
    """Emits the loops of a :class:`GemmPlan` (batch axes, M blocks, column tiles, K steps) and hands
    every evicted output tile to the epilogue emitter ``lw``. ``hoisted``: the epilogue's row-invariant
    operands, already loaded once for the kernel (``epilogue.load``)."""

    def __init__(self, kb: KernelBuilder, lw: FusedEmitter, plan: GemmPlan, mm: fx.Node, operands: tuple,
                 ranks: tuple[int, int], hoisted: dict) -> None:
        self.kb, self.lw, self.p, self.mm = kb, lw, plan, mm
        self.sa, self.sb = operands
        self.ra, self.rb = ranks
        self.hoisted = hoisted
        self.D = list(mm.meta["val"].shape)

    def emit(self) -> None:
        self._batch_loops(0, [])

    def _batch_loops(self, k: int, bvars: list) -> None:
        if k < self.p.nbatch:
            with maybe_loop(self.kb, self.D[k], "affine", "b") as v:
                self.lw.at.loop_vars[k] = v
                self._batch_loops(k + 1, bvars + [v])
            return
        self._tiles(bvars)

    # --- sizes and layout ----------------------------------------------------------------------
    def _sub_rows(self, mt):
        return ragged(self.p.M, self.p.PMAX, mt)

    def _krows_of(self, kk):
        return ragged(self.p.K, self.p.KMAX, kk)

    def _lhs_col(self, i, kk, nb: int):
        """lhs^T block layout of a block of nb row tiles. TensorE-transposed: row tile i, k tile kk ->
        columns [(i*nk + kk)*128, +128) (one PSUM bank gathers consecutive k tiles of a row tile).
        Loaded directly: [(kk*nb + i)*128, +128), so one DMA per k tile fills the whole block with
        nb*128 contiguous elements per partition instead of nb descriptors of 128."""
        PMAX = self.p.PMAX
        return (i * self.p.nk + kk) * PMAX if self.p.lhs_tr else (kk * nb + i) * PMAX

    # --- operands ------------------------------------------------------------------------------
    def _stage_rows(self, stages: list, src: Source, bvars, rank: int, row_ax: int, col_ax: int,
                    row_specs: list, q0: int, qn: int) -> None:
        """DMA rows [row0, +nrows) x k columns of chunk (q0, qn) into the stage tiles."""
        KMAX = self.p.KMAX
        kcols = min(self.p.K - KMAX * q0, KMAX * qn)
        for st, (row0, nrows) in zip(stages, row_specs):
            self.kb.dma(st.region(nrows, kcols),
                        operand_access(self.kb, src, bvars, batch_strides(src.meta), row_ax, col_ax,
                                       row0, nrows, KMAX * q0, kcols))

    def _transpose_chunk(self, stages: list, nrows_of: list, q0: int, qn: int, dst, dst_col, per: int,
                         engine: str) -> None:
        """dst[0:krows, dst_col(kk) + ...] = transposes of the stage tiles' k tiles q0..q0+qn.
        ``per`` k tiles of one stage, or one k tile of every stage, share one PSUM bank and one
        eviction."""
        kb, PMAX, KMAX, in_dt = self.kb, self.p.PMAX, self.p.KMAX, self.p.in_dt
        nblk = per * len(stages)
        exact_blocks = not tensor_transpose_exact(kb.target, in_dt)
        with maybe_loop(kb, qn // per, "affine", "kt") as kg:
            kk0 = q0 + kg * per
            krows = self._krows_of(kk0)
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

    def _load_lhsT(self, lhsT, m0, nb: int, bvars) -> None:
        kb, p, ra = self.kb, self.p, self.ra
        PMAX, KMAX = p.PMAX, p.KMAX
        if p.lhs_tr:
            with maybe_loop(kb, nb, "affine", "li") as i:
                mt = m0 + i
                rows = self._sub_rows(mt)
                st = kb.tile((PMAX, p.K), p.in_dt, prefix="lhs_rows")
                self._stage_rows([st], self.sa, bvars, ra, ra - 2, ra - 1, [(PMAX * mt, rows)], 0, p.nk)
                self._transpose_chunk([st], [rows], 0, p.nk, lhsT, lambda kk: self._lhs_col(i, kk, nb), p.grp,
                                      "vector")
            return
        # the block's rows [m0*128, +width) of every k row in one DMA per k tile
        width = sympy.Min(nb * PMAX, p.M - PMAX * m0) if p.M % PMAX else sympy.Integer(nb * PMAX)
        with maybe_loop(kb, p.nk, "affine", "kl") as kk:
            krows = self._krows_of(kk)
            kb.dma(TileRegion(lhsT, (0, self._lhs_col(0, kk, nb)), (krows, width)),
                   operand_access(kb, self.sa, bvars, batch_strides(self.sa.meta), ra - 1, ra - 2,
                                  KMAX * kk, krows, PMAX * m0, width))

    # --- output tiles --------------------------------------------------------------------------
    def _evict(self, acc, mt, rows, fcv, cw) -> None:
        lw = self.lw
        lw.at.ip = mt
        lw.at.rows = rows
        lw.at.fcv = fcv
        lw.at.cols = cw
        res = self.kb.tile((self.p.PMAX, lw.tp.fc), "float32", prefix="res")
        resr = res.region(rows, cw)
        self.kb.copy("vector", resr, acc.region(rows, cw))
        lw.vals = {self.mm: TVal("full", resr)}
        epi_hoist.bind(lw, self.hoisted)
        lw.eval(accs={})

    def _tiles(self, bvars) -> None:
        """Blocks of bm row tiles, then one ragged block of the rest: a tile count with no good
        divisor (86 = 2 x 43 for 11008 rows) keeps tall blocks and so few passes over the rhs."""
        kb, bm = self.kb, self.p.bm
        full, tail = divmod(self.p.nm, bm)
        if full:
            with maybe_loop(kb, full, "affine", "mb") as mb:
                self._block(bvars, mb * bm, bm)
        if tail:  # a scope of its own, so its tiles are not live beside the full blocks'
            with kb.loop(1, "affine", "mt"):
                self._block(bvars, sympy.Integer(full * bm), tail)

    def _block(self, bvars, m0, nb: int) -> None:
        """Row tiles [m0, m0 + nb): the lhs^T of the block, all of K, loaded once; every column
        tile of the output."""
        p = self.p
        lhsT = self.kb.tile((p.KMAX, p.nk * nb * p.PMAX), p.in_dt, prefix="lhsT")
        self._load_lhsT(lhsT, m0, nb, bvars)
        if p.rhs_tr or p.rhs_res:
            self._columns_resident(lhsT, m0, nb, bvars, direct=not p.rhs_tr)
            return
        self._columns_streamed(lhsT, m0, nb, bvars)

    def _columns_streamed(self, lhsT, m0, nb: int, bvars) -> None:
        """Column tiles (``nw`` per rhs DMA) of the block: per k tile one rhs DMA, multiplied into an
        accumulator per (row tile, column tile); every accumulator evicted after the last k tile."""
        kb, p, lw, sb, rb = self.kb, self.p, self.lw, self.sb, self.rb
        N, NMAX, KMAX, PMAX, nw, nk = p.N, p.NMAX, p.KMAX, p.PMAX, p.nw, p.nk
        with maybe_loop(kb, p.nn // nw, "affine", "n") as jn:
            def cols_of(jt):
                return ragged(N, NMAX, jt)
            cols = cols_of(jn) if nw == 1 else (
                sympy.Min(nw * NMAX, N - nw * NMAX * jn) if N % NMAX else sympy.Integer(nw * NMAX))
            accs = [kb.tile((PMAX, lw.tp.fc), "float32", "psum", prefix="acc") for _ in range(nb * nw)]
            with maybe_loop(kb, nk, "affine", "k") as kk:
                krows = self._krows_of(kk)
                rhs_t = kb.tile((KMAX, nw * lw.tp.fc), p.in_dt, prefix="rhs")
                rhs_r = rhs_t.region(krows, cols)
                kb.dma(rhs_r, operand_access(kb, sb, bvars, batch_strides(sb.meta), rb - 2, rb - 1,
                                             KMAX * kk, krows, nw * NMAX * jn, cols))
                for i in range(nb):
                    rows = self._sub_rows(m0 + i)
                    for w in range(nw):
                        cw = cols if nw == 1 else cols_of(jn * nw + w)
                        kb.nc_matmul(accs[i * nw + w].region(rows, cw),
                                     stationary=TileRegion(lhsT, (0, self._lhs_col(i, kk, nb)), (krows, rows)),
                                     moving=TileRegion(rhs_t, (0, w * NMAX), (krows, cw)),
                                     accumulate=sympy.Gt(kk, 0) if nk > 1 else False)
            for i in range(nb):
                for w in range(nw):
                    self._evict(accs[i * nw + w], m0 + i, self._sub_rows(m0 + i), jn * nw + w,
                                cols if nw == 1 else cols_of(jn * nw + w))

    def _columns_resident(self, lhsT, m0, nb: int, bvars, direct: bool) -> None:
        """Column tiles of ``CW`` columns of the block, each resident (all of K) while the block's row
        tiles loop inside it, one PSUM bank each."""
        kb, p, lw, sb, rb = self.kb, self.p, self.lw, self.sb, self.rb
        N, CW, PMAX, KMAX, nk = p.N, p.CW, p.PMAX, p.KMAX, p.nk
        ncw = ceil_div(N, CW)
        nsub = CW // PMAX
        with maybe_loop(kb, ncw, "affine", "n") as jn:
            cols = ragged(N, CW, jn)
            rhsT = kb.tile((KMAX, nk * CW), p.in_dt, prefix="rhsT")
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
                        kb.dma(TileRegion(rhsT, (0, kk * CW), (self._krows_of(kk), cols)),
                               operand_access(kb, sb, bvars, batch_strides(sb.meta), rb - 2, rb - 1,
                                              KMAX * kk, self._krows_of(kk), CW * jn, cols))
            else:
                sts = [kb.tile((PMAX, p.K), p.in_dt, prefix="rhs_rows") for _ in subs]
                self._stage_rows(sts, sb, bvars, rb, rb - 1, rb - 2, subs, 0, nk)
                self._transpose_chunk(sts, [n for _, n in subs], 0, nk, rhsT, lambda kk: kk * CW, 1, "scalar")
            with maybe_loop(kb, nb, "affine", "mi") as i:
                mt = m0 + i
                rows = self._sub_rows(mt)
                acc = kb.tile((PMAX, lw.tp.fc), "float32", "psum", prefix="acc")
                with maybe_loop(kb, nk, "affine", "k") as kk:
                    krows = self._krows_of(kk)
                    kb.nc_matmul(acc.region(rows, cols),
                                 stationary=TileRegion(lhsT, (0, self._lhs_col(i, kk, nb)), (krows, rows)),
                                 moving=TileRegion(rhsT, (0, kk * CW), (krows, cols)),
                                 accumulate=sympy.Gt(kk, 0) if nk > 1 else False)
                self._evict(acc, mt, rows, jn, cols)
