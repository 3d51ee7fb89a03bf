"""Deep-K GEMMs with the weight streamed once: K outermost, fp32 accumulators resident in SBUF.

``gemm.lower_matmul`` keeps a block of row tiles of ``lhs^T`` over all of K resident and streams
the rhs once per block. At K = 11008 (a Llama down projection, its gradients) only 6 row tiles of
``lhs^T`` fit SBUF, so the rhs (the 90 MB weight) is read ``ceil(16 / 6) = 3`` times. Here the
roles turn: the output of *every* row tile for a block of ``Nb`` columns accumulates in SBUF (fp32,
``rows x Nb x 4`` bytes per partition), and K is walked in chunks of ``kc`` k tiles: each chunk of
the rhs (``kc x 128 x Nb``) is loaded once and multiplied into all row tiles (PSUM accumulates the
chunk's k tiles, VectorE adds the PSUM tile into the SBUF accumulator). The lhs is read once per
column block, the rhs once in all: traffic ``ceil(N / Nb) * |lhs| + |rhs|`` instead of
``|lhs| + passes * |rhs|``. The epilogue runs on the accumulator after the last chunk, exactly as on
an evicted PSUM tile. Summation order over K is the same (k ascending, fp32 throughout).

Chosen only when it moves fewer bytes and fits (``plan``); aligned shapes only (rows a multiple of
128, columns of the column block, K of 128), everything else keeps the resident-lhs plan.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import sympy

from ...ir import TileRegion
from ..builder import KernelBuilder, ceil_div
from ..loops import maybe_loop
from ..transpose import tensor_transpose, tensor_transpose_exact
from ...spec import AluOp

#: k tiles per chunk, largest first (one PSUM accumulation group and one VectorE add per chunk)
CHUNKS = (8, 6, 4)
#: column block widths tried, widest first (fewer passes over the lhs)
WIDTHS = (2048, 1024)


@dataclass(frozen=True)
class KStreamPlan:
    nb: int        # output columns accumulated per pass (Nb)
    kc: int        # k tiles per chunk
    inline: bool   # the epilogue runs inside the last chunk (its tiles fit beside the chunk's)

    def traffic(self, M: int, N: int, K: int, esz: int) -> int:
        """HBM bytes of the operands under this plan."""
        return ceil_div(N, self.nb) * M * K * esz + K * N * esz


def _chunk_bytes(kc: int, nb: int, nm: int, esz: int, lhs_tr: bool, rhs_tr: bool) -> int:
    """SBUF bytes per partition of one chunk's operand tiles and their transpose staging."""
    return kc * nm * 128 * esz + kc * nb * esz + (kc * 128 * esz if lhs_tr else 0) \
        + (kc * 128 * esz if rhs_tr else 0)


def sbuf_bytes(p: KStreamPlan, nm: int, nk: int, esz: int, lhs_tr: bool, rhs_tr: bool, epi: int,
               col_bytes: int = 0) -> int:
    """Peak SBUF bytes per partition: the accumulators, a chunk's operand tiles, and the epilogue's
    tiles (``epi``, plus ``col_bytes`` per column of the block: its row-invariant operands), beside
    the last chunk's when inline, after the chunk loop otherwise."""
    acc = nm * p.nb * 4
    epi = epi + col_bytes * p.nb
    full = _chunk_bytes(p.kc, p.nb, nm, esz, lhs_tr, rhs_tr)
    last = _chunk_bytes(nk - (ceil_div(nk, p.kc) - 1) * p.kc, p.nb, nm, esz, lhs_tr, rhs_tr)
    return acc + (max(full, last + epi) if p.inline else max(full, epi))


def plan(M: int, N: int, K: int, esz: int, lhs_tr: bool, rhs_tr: bool, budget: int, epi: int,
         resident_traffic: int, col_bytes: int = 0) -> KStreamPlan | None:
    """The K-streamed plan moving the fewest bytes that fits ``budget`` and beats the resident-lhs
    plan's ``resident_traffic`` by at least 10%, or None."""
    if M % 128 or K % 128 or N % 512:
        return None
    nm, nk = M // 128, K // 128
    best = None
    for nb in WIDTHS:
        if N % nb and nb < N:
            continue
        nbw = min(nb, N)
        fits = [KStreamPlan(nbw, kc, inline) for kc in CHUNKS if kc <= nk for inline in (True, False)
                if sbuf_bytes(KStreamPlan(nbw, kc, inline), nm, nk, esz, lhs_tr, rhs_tr, epi,
                              col_bytes) <= budget]
        if fits and (best is None or fits[0].traffic(M, N, K, esz) < best.traffic(M, N, K, esz)):
            best = fits[0]
    if best is None or 10 * best.traffic(M, N, K, esz) > 9 * resident_traffic:
        return None
    return best


def emit(kb: KernelBuilder, p: KStreamPlan, M: int, N: int, K: int, in_dt: str, lhs_tr: bool,
         rhs_tr: bool, lhs_access: Callable, rhs_access: Callable, epilogue: Callable,
         prologue: Callable | None = None) -> None:
    """The kernel body. ``lhs_access(row0, rows, k0, kcols)`` / ``rhs_access(k0, krows, col0, cols)``
    give HBM accesses of logical ``[rows, k]`` / ``[k, cols]`` blocks of the operands (transposed
    views when ``*_tr``: then their contiguous axis is K); ``epilogue(region, row_tile, col_tile)``
    finishes one 128 x 512 output tile from its fp32 accumulator region. ``prologue(col0, cols)``
    runs once per column block where its epilogues start (it loads what they all share)."""
    P, NT = 128, 512
    nm, nk = M // P, K // P
    nbw, kc = p.nb, p.kc
    nch = ceil_div(nk, kc)
    last = nk - (nch - 1) * kc  # k tiles of the last chunk (all of kc, or fewer)

    with maybe_loop(kb, ceil_div(N, nbw), "affine", "nb") as jb:
        acc = kb.tile((P, nm * nbw), "float32", prefix="kacc")
        kb.memset(acc.region(P, nm * nbw), 0.0)

        def chunk(k0, nkc: int, final: bool) -> None:
            lhsT = kb.tile((P, nkc * nm * P), in_dt, prefix="klhsT")
            rhs = kb.tile((P, nkc * nbw), in_dt, prefix="krhs")
            _load_lhsT(kb, lhsT, nm, nkc, k0, in_dt, lhs_tr, lhs_access)
            _load_rhs(kb, rhs, nbw, nkc, k0, jb * nbw, in_dt, rhs_tr, rhs_access)
            with maybe_loop(kb, nm, "affine", "km") as i:
                with maybe_loop(kb, nbw // NT, "affine", "kn") as c:
                    ps = kb.tile((P, NT), "float32", "psum", prefix="kps")
                    for kk in range(nkc):
                        kb.nc_matmul(ps.region(P, NT), stationary=TileRegion(lhsT, (0, (kk * nm + i) * P), (P, P)),
                                     moving=TileRegion(rhs, (0, kk * nbw + c * NT), (P, NT)), accumulate=kk > 0)
                    dst = TileRegion(acc, (0, i * nbw + c * NT), (P, NT))
                    kb.tensor_tensor(dst, data1=dst, data2=ps.region(P, NT), op=AluOp.add)
                    if final:  # the tile is complete: its epilogue overlaps the next tiles' matmuls
                        epilogue(dst, i, jb * (nbw // NT) + c)
        if nch > 1:
            with maybe_loop(kb, nch - 1, "affine", "kq") as q:
                chunk(q * kc, kc, False)
        with kb.loop(1, "affine", "kt"):  # a scope of its own: its tiles are not live beside the loop's
            if p.inline and prologue is not None:
                prologue(jb * nbw, nbw)
            chunk(sympy.Integer((nch - 1) * kc), last, p.inline)
        if not p.inline:
            # the epilogue's shared tiles in a scope of their own: live beside its tiles only
            with kb.loop(1, "affine", "ke") if prologue is not None else contextlib.nullcontext():
                if prologue is not None:
                    prologue(jb * nbw, nbw)
                with maybe_loop(kb, nm, "affine", "em") as i:
                    with maybe_loop(kb, nbw // NT, "affine", "en") as c:
                        epilogue(TileRegion(acc, (0, i * nbw + c * NT), (P, NT)), i, jb * (nbw // NT) + c)


def _transpose_into(kb: KernelBuilder, dst, dst_col, stage, nkc: int, in_dt: str, engine: str) -> None:
    """dst[:, dst_col(kk) : +128] = stage[:, kk*128 : +128]^T for each k tile of the stage rows."""
    P = 128
    for kk in range(nkc):
        tp = kb.tile((P, P), in_dt, "psum", prefix="ktp")
        tensor_transpose(kb, tp.region(P, P), TileRegion(stage, (0, kk * P), (P, P)))
        kb.copy(engine, TileRegion(dst, (0, dst_col(kk)), (P, P)), tp.region(P, P))
        kb.release(tp)


def _load_lhsT(kb, lhsT, nm: int, nkc: int, k0, in_dt: str, lhs_tr: bool, lhs_access) -> None:
    """lhsT[:, (kk*nm + i)*128 : +128] = lhs[row tile i, k tile k0 + kk]^T."""
    P = 128
    if lhs_tr:
        with maybe_loop(kb, nm, "affine", "kl") as i:
            st = kb.tile((P, nkc * P), in_dt, prefix="klrows")
            kb.dma(st.region(P, nkc * P), lhs_access(i * P, P, k0 * P, nkc * P))
            _transpose_into(kb, lhsT, lambda kk: (kk * nm + i) * P, st, nkc, in_dt, "vector")
        return
    for kk in range(nkc):  # lhs^T rows are K-major already: one DMA per k tile for every row
        kb.dma(TileRegion(lhsT, (0, kk * nm * P), (P, nm * P)), lhs_access(0, nm * P, (k0 + kk) * P, P,
                                                                        transposed=True))


def _load_rhs(kb, rhs, nbw: int, nkc: int, k0, col0, in_dt: str, rhs_tr: bool, rhs_access) -> None:
    """rhs[:, kk*nbw + j] = B[k0 + kk tile, col0 + j]."""
    P = 128
    if rhs_tr:
        with maybe_loop(kb, nbw // P, "affine", "kr") as s:
            st = kb.tile((P, nkc * P), in_dt, prefix="krrows")
            kb.dma(st.region(P, nkc * P), rhs_access(k0 * P, nkc * P, col0 + s * P, P, transposed=True))
            _transpose_into(kb, rhs, lambda kk: kk * nbw + s * P, st, nkc, in_dt, "scalar")
        return
    for kk in range(nkc):
        kb.dma(TileRegion(rhs, (0, kk * nbw), (P, nbw)), rhs_access((k0 + kk) * P, P, col0, nbw))





# --- the whole rhs resident ------------------------------------------------------------------
#: row tiles of lhs^T loaded per block: one DMA per k tile moves 8 x 128 contiguous elements per
#: partition (2 KiB of bf16: not a small descriptor)
RES_BLOCK = 8


def prefer_rhs_resident(M: int, N: int, K: int, esz: int, budget: int, epi: int, resident_traffic: int) -> bool:
    """The whole rhs (``K x N``), a block of ``RES_BLOCK`` row tiles of lhs^T and one eviction's
    epilogue tiles fit SBUF (aligned shapes only), and reading both operands once beats the
    resident-lhs plan's ``resident_traffic`` by at least 10%."""
    if M % 128 or K % 128 or N % 512 or 10 * (M * K + K * N) * esz > 9 * resident_traffic:
        return False
    nk = K // 128
    return nk * N * esz + nk * RES_BLOCK * 128 * esz + epi + 2 * 512 * 4 <= budget


def prefer_rows_transposed(M: int, N: int, K: int, esz: int, budget: int, epi: int) -> bool:
    """A row-major lhs transposed on VectorE (trn1 fp32: ``transpose.tensor_transpose``): the whole
    rhs, one row tile's staged rows and their transposes, and one eviction's epilogue tiles fit SBUF
    (aligned shapes only). The resident-lhs plan transposes a whole M block before its first matmul,
    so VectorE and TensorE take turns (rmsnorm_matmul: 0.46 ms of transposes, then 0.87 ms of
    matmuls); one row tile per pipelined iteration overlaps the two, and reads both operands once."""
    if M % 128 or K % 128 or N % 512:
        return False
    return (K // 128) * N * esz + 2 * K * esz + epi + 2 * 512 * 4 <= budget


def emit_rhs_resident(kb: KernelBuilder, M: int, N: int, K: int, in_dt: str, lhs_access: Callable,
                      rhs_access: Callable, evict: Callable, lhs_rows: bool = False) -> None:
    """Shallow-K GEMMs with many rows (a weight gradient ``dY^T @ X`` at K = tokens): the rhs is
    loaded once and stays resident; lhs^T (K-major in HBM) streams once in blocks of row tiles, so
    both operands are read once where blocks of lhs^T over all of K re-read the rhs per block.
    ``lhs_rows``: the lhs is row-major; each row tile's rows are DMAed whole and transposed in its
    own loop iteration, so the transposes of one row tile overlap the matmuls of the previous ones.
    ``evict(psum_region, row_tile, col_tile)`` copies one output tile out of PSUM and finishes it."""
    P, NT = 128, 512
    nm, nk = M // P, K // P
    rhs = kb.tile((P, nk * N), in_dt, prefix="wrhs")
    for kk in range(nk):
        kb.dma(TileRegion(rhs, (0, kk * N), (P, N)), rhs_access(kk * P, P, 0, N))

    def block(m0, nbt: int) -> None:
        lhsT = kb.tile((P, nk * nbt * P), in_dt, prefix="wlhsT")
        if lhs_rows:  # nbt == 1: lhsT[:, kk*128 : +128] = rows[:, kk*128 : +128]^T
            st = kb.tile((P, K), in_dt, prefix="wrows")
            kb.dma(st.region(P, K), lhs_access(m0 * P, P, 0, K))
            if tensor_transpose_exact(kb.target, in_dt):
                _transpose_into(kb, lhsT, lambda kk: kk * P, st, nk, in_dt, "scalar")
            else:  # VectorE 32 x 32 blocks straight into SBUF
                for kk in range(nk):
                    tensor_transpose(kb, TileRegion(lhsT, (0, kk * P), (P, P)), TileRegion(st, (0, kk * P), (P, P)))
        else:
            for kk in range(nk):
                kb.dma(TileRegion(lhsT, (0, kk * nbt * P), (P, nbt * P)),
                       lhs_access(m0 * P, nbt * P, kk * P, P, transposed=True))
        with maybe_loop(kb, nbt, "affine", "wm") as i:
            with maybe_loop(kb, N // NT, "affine", "wn") as c:
                ps = kb.tile((P, NT), "float32", "psum", prefix="wps")
                for kk in range(nk):
                    kb.nc_matmul(ps.region(P, NT), stationary=TileRegion(lhsT, (0, (kk * nbt + i) * P), (P, P)),
                                 moving=TileRegion(rhs, (0, kk * N + c * NT), (P, NT)), accumulate=kk > 0)
                evict(ps, m0 + i, c)

    bsz = 1 if lhs_rows else RES_BLOCK
    full, tail = divmod(nm, bsz)
    if full:
        with maybe_loop(kb, full, "affine", "wb") as mb:
            block(mb * bsz, bsz)
    if tail:
        with kb.loop(1, "affine", "wt"):
            block(sympy.Integer(full * bsz), tail)
