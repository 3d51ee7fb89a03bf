"""Skinny matmuls: ``mm`` / ``bmm`` with at most ``MAX_ROWS`` output rows per batch entry.

Why a plan of its own (issue #26): a decode step multiplies one token's row (or a few) by weights and
by a KV cache. The general plan (``matmul.py``) is built around 128-row output tiles; with one row it
loads the lhs^T one 128-deep k tile per DMA (a 1.3 us fixed cost each, all in one queue), evicts every
TensorE transpose of a ``W^T`` operand on ScalarE alone (which then bounds the kernel) and runs a
bmm's epilogue on one partition per batch entry. Priced by the calibrated model on trn2 those cost
2-14x the bytes' HBM time (docs/results/calibration.md, "The Llama-7B layer on the calibrated model").

The plan here:
* the lhs (at most 8 rows, or 128 batch entries of one row) is loaded row-contiguously in one DMA and
  transposed on TensorE into the small stationary operand; the rhs streams through the moving side
  in 512-column tiles (``nc_matmul`` moving free size limit), so each matmul does 4 x 128 columns of
  work for one fixed cost;
* a K-major rhs (``V`` of a cache, a ``[K, N]`` weight) is DMAed straight into the moving layout,
  its k tiles spread over several DMA statements (each is an in-order queue);
* an N-major rhs (``W^T`` of ``nn.Linear``, ``K^T`` of a cache: the contraction axis contiguous) is
  loaded as contiguous rows, 128 output columns per DMA, transposed on TensorE 4 blocks per PSUM bank,
  and each bank is evicted partly by VectorE and partly by ScalarE in proportion to their copy rates;
* "batch on partitions": a bmm with one row per batch entry (``q @ K^T`` per head) puts entry ``b``
  on output partition ``b``: its stationary is block-diagonal (column ``b`` holds the entry's lhs,
  the others zero), every entry of a 128-entry tile accumulates into the same PSUM group, and the
  epilogue (scale, mask) runs once on up to 128 lanes instead of once per entry on one;
* a bmm with one row per entry and an rhs shared by all entries (batch stride 0: a weight applied to
  every sequence of a batch after a reshape) is an mm with one row per entry: the entries are the
  output rows, so the rhs is read once, not once per entry.
All sums stay fp32 in PSUM; the transposes are exact copies (``transpose.tensor_transpose``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import sympy
import torch
import torch.fx as fx

from ...config import Config
from ...ir import HBMAccess, TileRegion
from ...spec import AluOp
from ..builder import KernelBuilder, TVal, ceil_div
from ..fused.emitter import FusedEmitter
from ..fused.group import FusedGroup, Source
from ..fused.tiling import plan_tiles
from ..layout import hw_dtype, word_scale
from ..loops import largest_divisor, maybe_loop, ragged
from ..partition_ops import broadcast_partitions
from ..transpose import tensor_transpose, tensor_transpose_exact

aten = torch.ops.aten

#: output rows per batch entry up to which a matmul is "skinny" (decode: one token per sequence,
#: up to 8 sequences)
MAX_ROWS = 8
#: DMA statements the k tiles of a K-major rhs are spread over (each statement is one in-order queue
#: paying the fixed DMA cost per transfer, docs/results/calibration.md "DMA queue assignment")
RHS_QUEUES = 8
#: SBUF bytes per partition the staged rhs rows of one column group may take (with the row-dot
#: products of its first 128 columns)
STAGE_BYTES = 144 * 1024
#: staged rhs rows are DMAed (and multiplied, for row dots) in pieces of this many K elements: 4 KiB
#: bf16 per partition, 512 KiB per DMA (longer than its fixed cost), and SBUF held per piece, so
#: column tiles pipeline (the cost model's SBUF depth counts what one instruction or DMA touches)
STAGE_PIECE = 2048
#: block-diagonal stationary operands of one batch tile may take at most this many SBUF bytes per
#: partition, and be built by at most this many column copies (GpSimd, ~0.13 us each)
DIAG_BYTES = 64 * 1024
DIAG_COPIES = 128
#: columns of a 512-column PSUM eviction VectorE takes; ScalarE takes the rest. Equal busy time by
#: the cost model's copy rates on trn2: VectorE (n/2 + 60) cycles at 0.96 GHz, ScalarE (n + 60) at 1.2 GHz
VECTOR_EVICT_COLS = 320


@dataclass(frozen=True)
class SkinnyShape:
    """What the plan needs to know about one matmul."""

    nb: int          # batch axes of the output (0: mm, 1: bmm)
    B: int           # batch entries
    M: int
    N: int
    K: int
    in_dt: str
    esz: int
    rhs_tr: bool     # rhs N-major: rows of B^T contiguous, transposed on TensorE
    diag: bool       # batch on partitions (bmm with one row per entry)
    Bt: int          # batch entries per partition tile (diag) else 1
    groups: int      # 512-column tiles per column group (PSUM accumulators live at once)
    #: one lhs row against an N-major rhs: the first 128 columns of every column tile are dot
    #: products on GpSimd (multiply) and VectorE (sum along K) instead of TensorE transposes
    rowdot: bool = False
    #: every column as row dot products: where a TensorE transpose is not exact (NeuronCore-v2),
    #: ``tensor_transpose`` takes 16 VectorE instructions per 128 x 128 block, ~10x a row dot's cost
    dots_only: bool = False
    #: bmm with one row per entry and the rhs shared by every entry: the entries are the rows
    shared: bool = False

    @property
    def nk(self) -> int:
        return ceil_div(self.K, 128)

    @property
    def rows(self) -> int:
        """Output partitions of one unit: its batch entries (diag, shared) or its M rows."""
        return self.Bt if self.diag else (self.B if self.shared else self.M)

    @property
    def entries_on_partitions(self) -> bool:
        return self.diag or self.shared


def skinny_shape(mm: fx.Node, sa: Source, sb: Source, target) -> SkinnyShape | None:
    """The plan's shape for ``mm``, or None when the matmul is not skinny or this plan cannot hold
    it (the general plan then lowers it)."""
    out = list(mm.meta["val"].shape)
    nb = len(out) - 2
    M, N = out[-2:]
    K = mm.args[0].meta["val"].shape[-1]
    if not 1 <= M <= MAX_ROWS or N < 1 or K < 1 or nb > 1:
        return None
    if sa.base_dtype != sb.base_dtype or sa.base_dtype not in ("float32", "bfloat16", "float16") \
            or word_scale(sa.base_dtype) != 1:
        return None
    in_dt = hw_dtype(sa.base_dtype)
    esz = 2 if in_dt in ("bfloat16", "float16") else 4
    rb = mm.args[1].meta["val"].dim()
    rhs_tr = sb.meta.stride[rb - 2] == 1 and sb.meta.stride[rb - 1] != 1 and N > 1
    if 4 * K * esz > 96 * 1024:
        return None  # rows too long to stage whole: the general (K-streamed) plan
    B = out[0] if nb else 1
    nk = ceil_div(K, 128)
    Bt = min(B, target.partitions)
    shared = nb == 1 and M == 1 and 1 < B <= target.partitions and \
        (sb.meta.size[0] == 1 or sb.meta.stride[0] == 0)
    diag = (not shared and nb == 1 and M == 1 and B > 1 and B % Bt == 0 and nk * Bt <= DIAG_COPIES
            and nk * Bt * Bt * esz <= DIAG_BYTES)
    nc = ceil_div(N, target.matmul_n_max)
    # PSUM: an accumulator bank per column tile of the group, a transpose bank each (N-major rhs),
    # one bank for the lhs transposes
    tail = N % target.matmul_n_max or target.matmul_n_max
    one_row = rhs_tr and M == 1 and not diag and not shared
    dots_only = one_row and not tensor_transpose_exact(target, in_dt)
    rowdot = dots_only or (one_row and N >= target.matmul_n_max and tail > 128)
    per_tile = 4 * K * esz
    gmax = 1 if rowdot else (max(1, min(3, STAGE_BYTES // per_tile)) if rhs_tr else 4)
    return SkinnyShape(nb, B, M, N, K, in_dt, esz, rhs_tr, diag, Bt if diag else 1,
                       largest_divisor(nc, gmax), rowdot, dots_only, shared)


def _access(kb: KernelBuilder, src: Source, off, pattern) -> HBMAccess:
    param = kb.param(src.host, src.base_extent, hw_dtype(src.base_dtype))
    return HBMAccess(param, sympy.expand(src.meta.storage_offset + off), tuple(pattern))


def lower_skinny(group: FusedGroup, sources: dict[fx.Node, Source], kb: KernelBuilder,
                 out_tensors: dict, out_meta: dict, cfg: Config) -> bool:
    """Emit the skinny plan for the group's matmul and its epilogue; False (nothing emitted) when the
    matmul is not skinny."""
    mm = next(n for n in group.nodes if n.target in (aten.mm.default, aten.bmm.default))
    a, b = mm.args[0], mm.args[1]
    if a in group.members or b in group.members:
        return False
    sa, sb = sources[a], sources[b]
    sh = skinny_shape(mm, sa, sb, kb.target)
    if sh is None:
        return False
    NMAX = kb.target.matmul_n_max
    D = tuple(mm.meta["val"].shape)
    tp = plan_tiles(FusedGroup(group.nodes, group.outputs, D), sources, kb.target, NMAX,
                    seeded=frozenset({mm}), merge=False)
    P, F = (0, 2) if sh.entries_on_partitions else (sh.nb, sh.nb + 1)
    lw = FusedEmitter(replace(tp, P=P, F=F, fc=min(sh.N, NMAX)), sources, kb, out_tensors, out_meta)
    kb.plan = (f"skinny matmul [{'x'.join(map(str, D[:-2])) or '-'}] {sh.M}x{sh.K} @ {sh.K}x{sh.N} "
               f"({sh.in_dt}): " + ("one batch entry per output partition (block-diagonal stationary), "
                                    if sh.diag else "the rhs shared by every batch entry, one entry per output "
                                    "partition, " if sh.shared else f"{sh.M} output row(s) on partitions, ")
               + f"lhs^T transposed on TensorE, rhs "
               + ("rows transposed on TensorE (evictions split VectorE/ScalarE)" if sh.rhs_tr
                  else "K-major straight into the moving side")
               + (", every column as row dot products on GpSimd + VectorE" if sh.dots_only else
                  ", the first 128 columns of each tile as row dot products on GpSimd + VectorE"
                  if sh.rowdot else "")
               + f" in 512-column tiles, {sh.groups} per PSUM group; "
               f"epilogue: {len(group.nodes) - 1} fused op(s)")
    _Emit(kb, lw, mm, sh, sa, sb).run()
    return True


class _Emit:
    """The loops of one skinny matmul kernel (see the module docstring)."""

    def __init__(self, kb: KernelBuilder, lw: FusedEmitter, mm: fx.Node, sh: SkinnyShape,
                 sa: Source, sb: Source) -> None:
        self.kb, self.lw, self.mm, self.sh, self.sa, self.sb = kb, lw, mm, sh, sa, sb
        self.ra, self.rb = mm.args[0].meta["val"].dim(), mm.args[1].meta["val"].dim()
        self.PMAX, self.NMAX = kb.target.partitions, kb.target.matmul_n_max

    def bstride(self, src: Source, rank: int) -> int:
        """Batch stride of a bmm operand (0 when broadcast)."""
        if self.sh.nb == 0 or src.meta.size[0] == 1:
            return 0
        return src.meta.stride[0]

    @property
    def kperm(self) -> bool:
        """Contraction index ``k = p * nk + kk`` (partition ``p``, k tile ``kk``) instead of
        ``kk * 128 + p``: with one lhs row and whole contiguous rhs rows (``V`` of a cache), each
        partition then reads ``nk`` consecutive rhs rows, one DMA of ``nk * N`` contiguous elements per
        partition for the whole entry instead of one ``N``-element descriptor per k tile (a sum's
        order is free). One column tile only (``N <= 512``)."""
        sh, st = self.sh, self.sb.meta.stride
        return (sh.rows == 1 and not sh.diag and not sh.rhs_tr and sh.K % 128 == 0 and sh.N <= self.NMAX
                and st[self.rb - 1] == 1 and st[self.rb - 2] == sh.N and sh.K * sh.N * sh.esz // 128 <= STAGE_BYTES)

    def run(self) -> None:
        sh = self.sh
        if self.kperm:
            self.kb.plan += "; contraction split k = partition * k tiles + tile (one rhs DMA per entry)"
        if sh.diag:
            with maybe_loop(self.kb, sh.B // sh.Bt, "affine", "bt") as ip:
                self.unit(ip, None)
            return
        if sh.shared:
            self.unit(sympy.Integer(0), None)
            return
        with maybe_loop(self.kb, sh.B, "affine", "b") as bv:
            if sh.nb:
                self.lw.at.loop_vars[0] = bv
            self.unit(sympy.Integer(0), bv)

    # --- the stationary side ---------------------------------------------------------------------
    def lhs_t(self, ip, bv):
        """The lhs of one unit, transposed: ``[128, nk * R]``, column ``kk * R + r`` = row ``r``'s k
        tile ``kk`` (row = batch entry for the block-diagonal plan)."""
        kb, sh, sa = self.kb, self.sh, self.sa
        R, K, nk = sh.rows, sh.K, sh.nk
        st = sa.meta.stride
        if self.kperm:  # one row: lhs^T [p, kk] = a[p * nk + kk], nk contiguous elements per partition
            aT = kb.tile((self.PMAX, nk), sh.in_dt, prefix="lhsT")
            off = (bv * self.bstride(sa, self.ra)) if bv is not None else 0
            kb.dma(aT.region(self.PMAX, nk), _access(kb, sa, off, ((nk * st[self.ra - 1], self.PMAX),
                                                                   (st[self.ra - 1], nk))))
            return aT, None
        rows = kb.tile((R, K), sh.in_dt, prefix="lhs_rows")
        if sh.entries_on_partitions:
            off, rstride = ip * self.PMAX * self.bstride(sa, self.ra), self.bstride(sa, self.ra)
        else:
            off = (bv * self.bstride(sa, self.ra)) if bv is not None else 0
            rstride = st[self.ra - 2]
        kb.dma(rows.region(R, K), _access(kb, sa, off, ((rstride, R), (st[self.ra - 1], K))))
        aT = kb.tile((self.PMAX, nk * R), sh.in_dt, prefix="lhsT")
        per = max(1, min(nk, kb.target.psum_bank_bytes // (R * sh.esz)))
        for g0 in range(0, nk, per):
            g = min(per, nk - g0)
            tp = kb.tile((self.PMAX, per * R), sh.in_dt, "psum", prefix="tpa")
            for u in range(g):
                kk = g0 + u
                krows = min(128, K - 128 * kk)
                tensor_transpose(kb, TileRegion(tp, (0, u * R), (krows, R)),
                                 TileRegion(rows, (0, 128 * kk), (R, krows)))
            krows = min(128, K - 128 * g0)
            kb.copy("vector", TileRegion(aT, (0, g0 * R), (krows, g * R)), tp.region(krows, g * R))
            kb.release(tp)
        if not sh.diag:
            return aT, rows
        # block-diagonal: entry b's k tile kk is column b of its own [128, Bt] block, the rest zero
        Bt = sh.Bt
        diag = kb.tile((self.PMAX, nk * Bt * Bt), sh.in_dt, prefix="lhs_diag")
        kb.memset(diag.region(self.PMAX, nk * Bt * Bt), 0.0, engine="gpsimd")
        for kk in range(nk):
            krows = min(128, K - 128 * kk)
            with maybe_loop(kb, Bt, "affine", "e") as e:
                kb.copy("gpsimd", TileRegion(diag, (0, (kk * Bt + e) * Bt + e), (krows, 1)),
                        TileRegion(aT, (0, kk * Bt + e), (krows, 1)))
        return diag, rows

    def stationary(self, lhs, kk, krows, e):
        R = self.sh.rows
        if self.sh.diag:
            return TileRegion(lhs, (0, (kk * R + e) * R), (krows, R))
        return TileRegion(lhs, (0, kk * R), (krows, R))

    # --- one unit: a batch entry, or a tile of batch entries on partitions -------------------------
    def unit(self, ip, bv) -> None:
        kb, sh = self.kb, self.sh
        lhs, rows = self.lhs_t(ip, bv)
        self.xb = self.broadcast(rows) if sh.rowdot else None
        nc = ceil_div(sh.N, self.NMAX)
        G = sh.groups
        with maybe_loop(kb, nc // G, "affine", "ng") as gv:
            accs = [kb.tile((sh.rows, self.NMAX), "float32", "psum", prefix="acc") for _ in range(G)]
            with maybe_loop(kb, sh.Bt if sh.diag else 1, "affine", "e") as e:
                entry = ip * self.PMAX + e if sh.diag else bv
                if self.kperm:
                    self.columns_kperm(accs[0], lhs, entry)
                elif sh.rhs_tr:
                    self.columns_transposed(accs, gv, lhs, e, entry)
                else:
                    self.columns_direct(accs, gv, lhs, e, entry)
            for j, acc in enumerate(accs):
                self.epilogue(acc, ip, gv * G + j)

    def broadcast(self, rows):
        """The lhs row on every partition (``[128, K]``), for the row dot products: TensorE
        multiplies it by a row of ones, one PSUM bank at a time."""
        kb, sh = self.kb, self.sh
        ones = kb.tile((1, self.PMAX), sh.in_dt, prefix="ones_row")
        kb.memset(ones.region(1, self.PMAX), 1.0)
        scratch = kb.tile((self.PMAX, self.NMAX), "float32", "psum", prefix="bc")
        xb = broadcast_partitions(kb, rows.region(1, sh.K), sh.K, scratch, ones)
        kb.release(scratch)
        return xb

    def row_dots(self, acc, st, nrows, col0=0) -> None:
        """``acc[0, n] = sum_k rhs_rows[n, k] * x[k]`` for the 128 staged rows ``st`` (the first
        128 columns of the tile): the products in fp32 on GpSimd (exact for bf16 inputs), their sum
        on VectorE, the column turned into a row on TensorE (an exact transpose) in the tile's own
        PSUM accumulator, beside the columns the matmuls accumulate."""
        kb, K = self.kb, self.sh.K
        pieces = self.pieces()
        part = kb.tile((self.PMAX, len(pieces)), "float32", prefix="dotpart")
        for i, (k0, w) in enumerate(pieces):  # K in pieces, as the rows arrive
            prod = kb.tile((self.PMAX, STAGE_PIECE), "float32", prefix="dotprod")
            kb.tensor_tensor(prod.region(nrows, w), data1=TileRegion(st, (0, k0), (nrows, w)),
                             data2=TileRegion(self.xb, (0, k0), (nrows, w)), op=AluOp.multiply, engine="gpsimd")
            kb.tensor_reduce(TileRegion(part, (0, i), (nrows, 1)), data=prod.region(nrows, w), op=AluOp.add,
                             axis=(1,), negate=False, keepdims=True)
            kb.release(prod)
        col = part
        if len(pieces) > 1:
            col = kb.tile((self.PMAX, 1), "float32", prefix="dotcol")
            kb.tensor_reduce(col.region(nrows, 1), data=part.region(nrows, len(pieces)), op=AluOp.add,
                             axis=(1,), negate=False, keepdims=True)
        tensor_transpose(kb, TileRegion(acc, (0, col0), (1, nrows)), col.region(nrows, 1))

    def pieces(self) -> list[tuple[int, int]]:
        """(start, width) of the K pieces staged rhs rows are loaded and multiplied in."""
        return [(k0, min(STAGE_PIECE, self.sh.K - k0)) for k0 in range(0, self.sh.K, STAGE_PIECE)]

    def col_range(self, c):
        return c * self.NMAX, ragged(self.sh.N, self.NMAX, c)

    def rhs_base(self, entry) -> sympy.Expr:
        return (entry * self.bstride(self.sb, self.rb)) if entry is not None else sympy.Integer(0)

    def columns_direct(self, accs, gv, lhs, e, entry) -> None:
        """K-major rhs: each k tile of each column tile DMAed into the moving layout."""
        kb, sh, sb = self.kb, self.sh, self.sb
        sk, sn = sb.meta.stride[self.rb - 2], sb.meta.stride[self.rb - 1]
        nq = largest_divisor(sh.nk, RHS_QUEUES)
        for qd in range(nq):
            with maybe_loop(kb, sh.nk // nq, "affine", "kr") as kr:
                kk = kr * nq + qd
                krows = ragged(sh.K, 128, kk)
                for j, acc in enumerate(accs):
                    c0, cols = self.col_range(gv * sh.groups + j)
                    mv = kb.tile((128, self.NMAX), sh.in_dt, prefix="rhs")
                    kb.dma(mv.region(krows, cols),
                           _access(kb, sb, self.rhs_base(entry) + kk * 128 * sk + c0 * sn,
                                   ((sk, krows), (sn, cols))))
                    self.matmul(acc, lhs, kk, krows, e, mv.region(krows, cols), cols)

    def columns_kperm(self, acc, lhs, entry) -> None:
        """The whole rhs of one entry in one DMA (``kperm``), then one matmul per k tile."""
        kb, sh = self.kb, self.sh
        nk, N = sh.nk, sh.N
        mv = kb.tile((self.PMAX, nk * N), sh.in_dt, prefix="rhs")
        kb.dma(mv.region(self.PMAX, nk * N), _access(kb, self.sb, self.rhs_base(entry),
                                                     ((nk * N, self.PMAX), (1, nk * N))))
        with maybe_loop(kb, nk, "affine", "k") as kk:
            self.matmul(acc, lhs, kk, sympy.Integer(self.PMAX), sympy.Integer(0),
                        TileRegion(mv, (0, kk * N), (self.PMAX, N)), N)

    def matmul(self, acc, lhs, kk, krows, e, moving, cols, col0=0) -> None:
        # the first matmul of the group (entry 0, k tile 0) starts it; e, kk >= 0
        accumulate = sympy.Gt(sympy.expand(e * self.sh.nk + kk), 0)
        if accumulate in (sympy.true, sympy.false):
            accumulate = bool(accumulate)
        self.kb.nc_matmul(TileRegion(acc, (0, col0), (self.sh.rows, cols)), stationary=self.stationary(lhs, kk, krows, e),
                          moving=moving, accumulate=accumulate)

    def columns_transposed(self, accs, gv, lhs, e, entry) -> None:
        """N-major rhs: 128 rows of B^T per DMA (contiguous K), 4 transposes per PSUM bank per k tile,
        the bank evicted by VectorE and ScalarE together, then one 512-column matmul."""
        kb, sh, sb = self.kb, self.sh, self.sb
        sk, sn = sb.meta.stride[self.rb - 2], sb.meta.stride[self.rb - 1]
        stages = []
        skip = 128 if sh.rowdot else 0  # output columns of a tile computed as row dot products
        for j in range(len(accs)):
            c0, _ = self.col_range(gv * sh.groups + j)
            subs = []
            for u in range(self.NMAX // 128):
                if u * 128 >= sh.N:
                    break
                n0 = sympy.Min(c0 + 128 * u, sh.N - 1)
                nrows = sympy.Max(1, sympy.Min(128, sh.N - c0 - 128 * u))
                st = kb.tile((128, sh.K), sh.in_dt, prefix="rhs_rows")
                for k0, w in self.pieces():
                    kb.dma(TileRegion(st, (0, k0), (nrows, w)),
                           _access(kb, sb, self.rhs_base(entry) + n0 * sn + k0 * sk, ((sn, nrows), (sk, w))))
                subs.append((st, nrows))
            if sh.rowdot:
                for u in range(len(subs) if sh.dots_only else 1):
                    self.row_dots(accs[j], *subs[u], 128 * u)
                subs = [] if sh.dots_only else subs[1:]
            stages.append(subs)
        if sh.dots_only:
            return
        with maybe_loop(kb, sh.nk, "affine", "k") as kk:
            krows = ragged(sh.K, 128, kk)
            for j, acc in enumerate(accs):
                _, cols = self.col_range(gv * sh.groups + j)
                cols = cols - skip
                tpb = kb.tile((128, self.NMAX), sh.in_dt, "psum", prefix="tpb")
                for u, (st, nrows) in enumerate(stages[j]):
                    tensor_transpose(kb, TileRegion(tpb, (0, 128 * u), (krows, nrows)),
                                     TileRegion(st, (0, 128 * kk), (nrows, krows)))
                mv = kb.tile((128, self.NMAX), sh.in_dt, prefix="rhsT")
                self.evict_split(mv, tpb, krows, cols)
                kb.release(tpb)
                self.matmul(acc, lhs, kk, krows, e, mv.region(krows, cols), cols, skip)

    def evict_split(self, dst, src, krows, cols) -> None:
        """Copy ``src[:krows, :cols]`` (PSUM) to ``dst``: VectorE the first ``VECTOR_EVICT_COLS``
        columns of 512 (in proportion for narrower banks), ScalarE the rest; half each of a narrower
        last column tile when it is at least 128 wide (every tile gets the same split); VectorE alone
        else."""
        skip = 128 if self.sh.rowdot else 0
        width = self.NMAX - skip
        tail = min(self.sh.N % self.NMAX or self.NMAX, self.sh.N) - skip
        share = VECTOR_EVICT_COLS * width // self.NMAX // 32 * 32
        split = share if tail > share else (tail // 2 if tail >= 128 else 0)
        if not split:
            self.kb.copy("vector", dst.region(krows, cols), src.region(krows, cols))
            return
        self.kb.copy("vector", dst.region(krows, split), src.region(krows, split))
        self.kb.copy("scalar", TileRegion(dst, (0, split), (krows, cols - split)),
                     TileRegion(src, (0, split), (krows, cols - split)))

    def epilogue(self, acc, ip, c) -> None:
        lw, sh = self.lw, self.sh
        _, cols = self.col_range(c)
        lw.at.ip, lw.at.rows, lw.at.fcv, lw.at.cols = ip, sympy.Integer(sh.rows), c, cols
        res = self.kb.tile((self.PMAX, lw.tp.fc), "float32", prefix="res")
        self.kb.copy("vector", res.region(sh.rows, cols), acc.region(sh.rows, cols))
        lw.vals = {self.mm: TVal("full", res.region(sh.rows, cols))}
        lw.eval(accs={})
