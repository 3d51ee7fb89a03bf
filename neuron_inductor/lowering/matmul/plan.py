"""The tile plan of a GEMM with its epilogue (``gemm.lower_matmul``), decided before any instruction.

Tile plan (docs/hardware.md, "Matmul tiling"): output tiles of 128 rows (the stationary operand's
free size) by 512 columns (one PSUM bank of fp32), the contraction axis on partitions in 128-deep
steps accumulated in PSUM, row tiles in M blocks whose ``lhs^T`` over all of K stays resident while
the rhs streams past it. :func:`plan_gemm` picks the block height, which operands are transposed on
TensorE, whether a K x 512 rhs column tile is resident, and how many column tiles share an rhs DMA;
:class:`GemmPlan` records it for the emitter (``emitter.GemmEmitter``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...target import Target
from ..builder import ceil_div
from ..fused.group import Source


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


@dataclass(frozen=True)
class GemmPlan:
    """A GEMM's tiles: its sizes (``nbatch`` leading batch axes), operand dtype, and the choices of
    :func:`plan_gemm`. ``lhs_tr`` / ``rhs_tr``: the operand's contraction axis is its contiguous one,
    so its rows are DMAed whole and transposed on TensorE; ``rhs_res``: a K x ``CW`` rhs column tile
    is resident and row tiles loop inside it; ``bm`` row tiles per M block; ``nw`` column tiles per
    rhs DMA; ``grp`` k tiles whose transposes share one PSUM bank."""

    M: int
    N: int
    K: int
    nbatch: int
    in_dt: str
    esz: int
    lhs_tr: bool
    rhs_tr: bool
    rhs_res: bool
    bm: int
    CW: int
    nw: int
    grp: int
    PMAX: int
    KMAX: int
    NMAX: int

    @property
    def nm(self) -> int:
        return ceil_div(self.M, self.PMAX)

    @property
    def nn(self) -> int:
        return ceil_div(self.N, self.NMAX)

    @property
    def nk(self) -> int:
        return ceil_div(self.K, self.KMAX)

    def describe(self) -> str:
        return (f"; M blocked by {self.bm} tile(s) with lhs^T hoisted over K"
                f"{' (TensorE transposes)' if self.lhs_tr else ''}, rhs"
                f"{' transposed on TensorE' if self.rhs_tr else ''}"
                f" reused by the block" + (f" in {self.CW}-column tiles, row tiles looped inside"
                                           if self.rhs_tr else ""))


@dataclass(frozen=True)
class _Sizes:
    """What the SBUF estimate of a candidate plan depends on."""

    nk: int
    K: int       # rows staged for TensorE transposes are whole K rows (one contiguous DMA row per partition)
    esz: int
    epi: int     # bytes per output column of one evicted tile and the tiles its epilogue allocates
    PMAX: int
    NMAX: int

    def sbuf_use(self, bm: int, cw: int, rtr: bool, lhs_tr: bool) -> int:
        """Peak SBUF bytes per partition: the lhs^T block plus the larger of its staging (an inner
        loop of its own) and the column loop's tiles."""
        lhs = self.nk * bm * self.PMAX * self.esz
        stage = self.K * self.esz if lhs_tr else 0
        if rtr:  # one evicted tile (and its epilogue's tiles) live per inner row step
            cols = self.nk * cw * self.esz + (cw // self.PMAX) * self.K * self.esz + 2 * self.epi * cw
        else:    # row tiles are evicted in an unrolled sequence; each eviction's tiles return to
            # the builder's pool before the next, so one eviction's worth is live at a time
            cols = 2 * self.NMAX * self.esz + 2 * self.epi * self.NMAX
        return lhs + max(stage, cols)


def transposed_operands(sa: Source, sb: Source, ra: int, rb: int, M: int, N: int) -> tuple[bool, bool]:
    """An operand whose contraction axis is the contiguous one ([M, K] row-major lhs, W^T rhs) cannot
    be DMAed into the [K, free] layout TensorE needs without one descriptor per element; it is loaded
    row-contiguously instead and transposed on TensorE through PSUM (docs/hardware.md: DMA, matmul
    tiling). ``ra`` / ``rb``: the operands' ranks."""
    lhs_tr = sa.meta.stride[ra - 1] == 1 and sa.meta.stride[ra - 2] != 1 and M > 1
    rhs_tr = sb.meta.stride[rb - 2] == 1 and sb.meta.stride[rb - 1] != 1 and N > 1
    return lhs_tr, rhs_tr


def plan_gemm(target: Target, sa: Source, sb: Source, ranks: tuple[int, int], shape: tuple[int, int, int, int],
              in_dt: str, epi: int, budget: int) -> GemmPlan:
    """The plan of ``shape`` = (batch axes, M, N, K) of operands of ``ranks`` within ``budget`` SBUF
    bytes per partition, ``epi`` bytes per output column of one evicted tile and its epilogue's tiles."""
    nbatch, M, N, K = shape
    PMAX, KMAX, NMAX = target.partitions, target.matmul_k_max, target.matmul_n_max
    esz = 2 if in_dt in ("bfloat16", "float16") else 4
    nm, nn, nk = ceil_div(M, PMAX), ceil_div(N, NMAX), ceil_div(K, KMAX)
    sz = _Sizes(nk, K, esz, epi, PMAX, NMAX)
    lhs_tr0, rhs_tr = transposed_operands(sa, sb, *ranks, M, N)
    lhs_tr = lhs_tr0
    # transposes gathered per PSUM bank (one eviction of 512 columns instead of four of 128)
    grp = next((g for g in (4, 2) if K % KMAX == 0 and nk % g == 0), 1)
    if rhs_tr:
        # W^T (nn.Linear): transposed once per (M block, column tile) and reused by every row tile of
        # the block, so the block is as tall as SBUF allows (transpose work ~ 128 / rows of block);
        # row tiles are an inner loop holding one PSUM bank each, so several accumulate in flight
        plans = [(bm, cw) for bm in block_sizes(nm, 16) for cw in (512, 256, 128)
                 if cw <= max(PMAX, ceil_div(N, PMAX) * PMAX)]
        fit = [pc for pc in plans if sz.sbuf_use(pc[0], pc[1], True, lhs_tr) <= budget]
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
        bm = next((c for c in block_sizes(nm, target.psum_banks - (1 if lhs_tr else 0))
                   if sz.sbuf_use(c, CW, False, lhs_tr) <= budget), 1)
    if sz.sbuf_use(bm, CW, rhs_tr, lhs_tr) > budget:
        lhs_tr = rhs_tr = False  # too deep to stage: strided loads, as before
        bm, CW = 1, NMAX
    if not rhs_tr and lhs_tr == lhs_tr0:
        # a K x 512 rhs column tile resident in SBUF lets row tiles run as an inner loop with one
        # PSUM bank each (several accumulation groups in flight) when the M block stays as tall
        for cand in block_sizes(nm, 32):
            if cand >= bm and sz.sbuf_use(cand, NMAX, True, lhs_tr) - (NMAX // PMAX) * K * esz <= budget:
                bm, rhs_res = cand, True
                break
    # n tiles sharing one rhs DMA: 2 x 512 columns make 2 KiB rows (docs/hardware.md, "DMA") and, with 4 m
    # tiles, 8 matmuls per k step, enough to hide a DMA's fixed cost; PSUM holds bm * nw groups
    nw = 2 if (not rhs_tr and nn % 2 == 0 and 2 * bm + (1 if lhs_tr else 0) <= target.psum_banks
               and sz.sbuf_use(bm, CW, False, lhs_tr) + 2 * NMAX * esz <= budget) else 1
    return GemmPlan(M, N, K, nbatch, in_dt, esz, lhs_tr, rhs_tr, rhs_res, bm, CW, nw, grp, PMAX, KMAX, NMAX)
