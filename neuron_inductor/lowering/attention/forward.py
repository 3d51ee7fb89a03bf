"""Flash attention forward on TensorE: ``aten._scaled_dot_product_flash_attention_for_cpu``.

The backend traces ``scaled_dot_product_attention`` letting torch pick its CPU flash kernel, so
attention reaches us as one forward op (returning ``(out, logsumexp)``) and one backward op with clear
semantics, instead of a score matrix materialised between a dozen ops. Grouped-query heads reach these
kernels with K and V repeated; cases they do not take (dropout, head dim > 128, very long sequences) are
decomposed to math by ``graph/decompositions.py`` before we ever see them, so nothing becomes an eager
fallback. Masks, operands and the case check are shared with the backward (``common.py``).

Instructions follow the documented NKI rules (docs/nki-rules.md): comparisons, maximum and
subtract on VectorE; float32 scalar operands; 1 / rowsum by a reciprocal, never a divide ALU op; ScalarE
copies as ``activation(copy)`` (``tensor_copy`` is not on ScalarE on trn1); a TensorE transpose writes a
PSUM tile of its input's dtype, so with bf16/fp16 operands every head in flight of the backward also
holds a PSUM bank of that dtype, while the forward transposes them as identity matmuls into its fp32
score banks (``transpose_instr``).

Forward (docs/hardware.md, "Flash attention"), per (batch, head), per 128-query tile: keys in steps of ``KEY_STEP`` (two PSUM
banks of 128 x 512 fp32 scores); each step: QK^T on TensorE (causal: the diagonal block's -HARD upper
triangle added by an identity matmul into the same PSUM group, no VectorE pass; other masks added while
leaving PSUM), row max straight from PSUM (VectorE), P = exp(scale*s - scale*m) in the matmul dtype
(ScalarE, scale folded into the activation), P^T in 128x128 blocks on TensorE written into the score
banks just consumed, evicted, and P [V | 1] accumulated in PSUM: a ones column of V yields the row sums,
so no activation reduce is needed. Across steps the output and sums are rescaled in fp32 SBUF (online
softmax) and scaled by 1 / row sum once at the end (FA-2). Scores never leave the chip; causal key
blocks right of the diagonal are never computed, and a causal query tile whose keys fit ``WHOLE_BANKS``
banks takes them all in one step (no rescaling). Every query tile takes the next banks of a ring of PSUM
score banks (with a P and a P^T tile per bank), so tiles of different widths share PSUM as they need it.
Each query tile's three passes over its scores (max, exp, P^T eviction) are all VectorE/ScalarE work:
evictions go to whichever of the two has less work so far, priced by the cost model; four query tiles
are in flight (own PSUM banks), eight in causal kernels (``CAUSAL_SETS``). Q and K come in 512-row groups, four rows per partition when the
lengths allow (1 KiB DMA descriptors instead of one 256-byte row each), put back in row order by strided
PSUM evictions; the logsumexp is finished and stored once per batch entry with the heads innermost,
where torch keeps it contiguous.

Two options serve ``explicit.py`` (explicit attention rewritten to this kernel): ``rep`` query heads
per K/V head (head h reads K/V head h // rep: the head loop runs over K/V heads, then their query
heads) and ``strict`` (``_Sanitizer``: Q and K rows made finite before TensorE transposes them, their
NaN flags added to the output row's 1 / l (query rows) and to V's ones column (key rows), so the
output has NaN exactly in the rows eager's explicit softmax gives NaN; rows are then loaded one per
partition, so each flag sits on its row's partition).

The backward kernel is in ``backward.py``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...costmodel.instrs import instr_cost, make_evaluator
from ...ir import HBMAccess, Instr, Tile, TileRegion
from ...spec import ActFunc, AluOp, Engine
from ..builder import Emitter, KernelBuilder, ceil_div
from ..loops import maybe_loop
from ..layout import LoweringError, hw_dtype
from ..registry import KernelContext, register_lowering
from .common import (BLOCKS_PER_BANK, DEAD, FLASH_FWD, HARD, NMAX, PMAX, AttnCtx, HeadTensor, attn_ctx, call_args,
                     call_results, copy_instr, head_input, head_output, transpose_instr, unsupported)

#: keys per online-softmax step of the forward: two PSUM banks of fp32 scores, reused for P^T and the
#: output once consumed, so four query tiles fit PSUM at once (measured by the cost model at Llama
#: shape: 2048-key steps with two tiles in flight were latency bound, 2.36x vs 1.66x of roofline)
KEY_STEP = 1024
#: query tiles in flight (each holds its own PSUM banks and SBUF tiles)
FWD_SETS = 4
#: causal: a query tile whose keys fit this many PSUM banks takes them in one online-softmax step, so
#: it never rescales its output (the tiles left of the diagonal's middle need 1-4 banks at 2048 keys)
WHOLE_BANKS = 4
#: causal: query tiles in flight in SBUF (their PSUM banks come from the ring as each needs them)
CAUSAL_SETS = 8



def _rows_per_partition(x: HeadTensor, S: int, D: int, strict: bool = False) -> int:
    """Sequence rows one partition takes per DMA when a 512-row group is loaded at once: 4 (1 KiB of
    bf16 per descriptor instead of 256 B) when the rows are contiguous and every group is whole, else 1
    (always 1 in strict mode: each row's non-finite flag must sit on the partition of its row)."""
    return 4 if S % NMAX == 0 and x.st[3] == 1 and x.st[2] == D and not strict else 1


class _Sanitizer:
    """Strict mode (``explicit.py``: explicit softmax attention, eager semantics): every Q and K row
    is made finite before TensorE transposes it (a transpose of NaN/Inf is not bit-accurate on
    trn1, and an identity matmul spreads a NaN over its whole block on every target), and its flag is
    kept: 0 for a finite row, NaN for a row holding NaN or +-Inf (``x * 0`` summed over the row by
    the same ScalarE pass, ``activation(reduce_res)``). The flags put the NaNs back where eager has
    them (``FwdEmitter``): a query row's into its output row, a key row's into every row."""

    def __init__(self, kb: KernelBuilder, dt: str, D: int) -> None:
        self.kb, self.D = kb, D
        self.zeros = kb.tile((PMAX, D), dt, prefix="zeros")
        kb.memset(self.zeros.region(PMAX, D), value=0.0, engine=Engine.gpsimd)

    def __call__(self, rows: TileRegion, flag: TileRegion) -> None:
        """Zero the non-finite values of ``rows`` ([n, D], in place); ``flag`` [n, 1] (fp32) gets
        the rows' flags."""
        kb, n, D = self.kb, rows.sizes[0], rows.sizes[1]
        junk = kb.tile((PMAX, D), "float32", prefix="zflag")
        kb.activation(junk.region(n, D), op=ActFunc.copy, data=rows, scale=0.0, reduce_op=AluOp.add,
                      reduce_res=flag)
        ok = kb.tile((PMAX, D), "uint8", prefix="finite")
        kb.tensor_scalar(ok.region(n, D), data=rows, operand0=0.0, op0=AluOp.abs, operand1=float("inf"),
                         op1=AluOp.less)
        kb.tensor_copy_predicated(rows, src=self.zeros.region(n, D), predicate=ok.region(n, D),
                                  reverse_pred=True, engine=Engine.vector)


def _load_group_T(kb: KernelBuilder, bal: "_Balance", x: HeadTensor, b, h, g0: int, n: int, D: int, dt: str,
                  tp: tuple[Tile, int], r: int, ident: Tile | None = None, san: "_Sanitizer | None" = None,
                  flags: "Callable[[int], TileRegion] | None" = None) -> Tile:
    """Rows [g0, g0 + n) (n <= 512) of a head transposed: [D, n] in a [128, 512] tile, transposed
    through 512 columns of the PSUM tile ``tp`` = (tile, first column), whose dtype is ``dt`` (a
    TensorE transpose writes its input's dtype). With r > 1 each
    partition loads r consecutive rows in one descriptor; the r TensorE transposes then hold rows
    r*p + j in column p, so their evictions write with stride r into a (128, 512 / r, r) tile whose
    flattened free index is the row offset, and one GpSimd copy (an engine with room in this kernel)
    makes it the plain 2-D tile TensorE operands must be. With ``san`` (strict mode, r = 1) each
    128-row block is made finite before its transpose and its rows' flags go to ``flags(block)``."""
    out = kb.tile((PMAX, NMAX), dt, prefix="xT")
    ps, pc = tp
    if r > 1:
        # r contiguous rows per partition (``_rows_per_partition``): one [PMAX, r * D] 2-D block
        stage = kb.tile((PMAX, r * D), dt, prefix="x_rows")
        kb.dma(stage.region(PMAX, r * D),
               HBMAccess(x.param, x.off + b * x.st[0] + h * x.st[1] + g0 * x.st[2],
                         ((r * x.st[2], PMAX), (x.st[3], r * D))))
        for j in range(r):
            kb.add(transpose_instr(TileRegion(ps, (0, pc + PMAX * j), (D, PMAX)),
                                   TileRegion(stage, (0, j * D), (PMAX, D)), ident))
        inter = kb.tile((PMAX, NMAX // r, r), dt, prefix="xT_strided")
        for j in range(r):
            bal.copy(TileRegion(inter, (0, 0, j), (D, PMAX, 1)), TileRegion(ps, (0, pc + PMAX * j), (D, PMAX)))
        kb.tensor_copy(out.region(D, NMAX), src=inter.region(D, NMAX // r, r), engine=Engine.gpsimd)
        return out
    stage = kb.tile((PMAX, BLOCKS_PER_BANK * D), dt, prefix="x_rows")
    for jj in range(ceil_div(n, PMAX)):
        cols = min(PMAX, n - PMAX * jj)
        sr = TileRegion(stage, (0, D * jj), (cols, D))
        kb.dma(sr, x.rows(b, h, g0 + PMAX * jj, cols, D))
        if san is not None:
            san(sr, flags(jj))
        kb.add(transpose_instr(TileRegion(ps, (0, pc + PMAX * jj), (D, cols)), sr, ident))
    bal.copy(out.region(D, n) if n == NMAX else TileRegion(out, (0, 0), (D, n)), TileRegion(ps, (0, pc), (D, n)))
    return out


def _tp(ts: dict, bi: int) -> tuple[Tile, int]:
    """Where a set transposes the blocks of its score bank ``bi``: the bank itself (its scores are
    consumed by then), first column 0."""
    return ts["s"][bi], 0


def _cols(t: Tile, c0: int, w: int, parts: int) -> TileRegion:
    """Columns [c0, c0 + w) of a tile from ``_load_group_T``."""
    return TileRegion(t, (0, c0), (parts, w))


# ------------------------------------------------------------------------------------ forward
class _Balance(Emitter):
    """VectorE / ScalarE work of the forward, priced by the cost model as it is emitted, so each
    PSUM eviction (which either engine can do) goes to the one with less work so far: the forward's
    three passes over every score (row max, exp, P^T eviction) are shared between exactly these two."""

    def __init__(self, kb: KernelBuilder) -> None:
        self.kb = kb
        self.load = {"vector": 0.0, "scalar": 0.0}

    def add(self, ins: Instr) -> None:  # type: ignore[override]
        self.kb.add(ins)
        if ins.engine in self.load:
            self.load[ins.engine] += instr_cost(ins, self.kb.target, make_evaluator({})).latency

    def either(self) -> str:
        return min(self.load, key=self.load.get)

    def copy(self, dst: TileRegion, src: TileRegion) -> None:
        self.add(copy_instr(self.either(), dst, src))

    def scale_rows(self, dst: TileRegion, src: TileRegion, factor: "TileRegion | float") -> None:
        """dst = src * factor (a [P, 1] float32 column or a constant) on the less busy engine; GpSimd
        tensor_scalar is documented for rsqrt only, so a multiply goes to VectorE or ScalarE."""
        if self.either() == "scalar":
            self.activation(dst, data=src, scale=factor, op=ActFunc.copy)
        else:
            self.tensor_scalar(dst, data=src, operand0=factor, op0=AluOp.multiply)


def flash_supports(q, k, v, dropout_p: float = 0.0, is_causal: bool = False, *, attn_mask=None,
                   scale=None) -> bool | str:
    """The registry's question for the forward op's arguments: :func:`unsupported`'s reason, or True."""
    return unsupported(q, k, v, dropout_p, attn_mask) or True


@dataclass(frozen=True)
class FwdPlan:
    """The forward kernel's shape and how it spends PSUM, decided before any instruction is emitted."""

    B: int
    H: int
    Sq: int
    Sk: int
    D: int
    dt: str        # matmul operands: the inputs' own precision
    out_dt: str
    step: int      # keys per online-softmax step
    nb: int        # PSUM banks of scores per set
    low: bool      # bf16/fp16 operands: P^T and Q^T/K^T are identity matmuls into the fp32 score banks
    nsets: int     # sets of score banks in PSUM at once
    tri: bool      # causal alone: the diagonal mask is a matmul into PSUM
    wmax: int      # causal: a query tile with at most this many keys takes them in one step
    nsb: int       # query tiles in flight in SBUF

    @property
    def nq(self) -> int:
        return ceil_div(self.Sq, PMAX)

    @property
    def nk(self) -> int:
        return ceil_div(self.Sk, PMAX)

    @property
    def nring(self) -> int:
        """PSUM banks in the ring of score banks."""
        return self.nsets * self.nb

    @property
    def nbmax(self) -> int:
        """Score banks of the widest query tile (one row-max column each in its stats tile)."""
        return ceil_div(self.wmax, NMAX)

    def describe(self, causal: bool) -> str:
        return (f"flash attention forward [{self.B}x{self.H}] q {self.Sq} x k {self.Sk} x d {self.D} ({self.dt}); "
                f"128-query tiles, keys in steps of {self.step} ({self.nb} PSUM bank(s) of scores, reused for P^T "
                f"and the output{f' (transposes of {self.dt} blocks as identity matmuls)' if self.low else ''}), "
                f"{self.nsb} query tile(s) in flight"
                f"{' (causal: whole tiles up to %d keys)' % self.wmax if causal else ''}; "
                f"row sums from a ones column of V, 1/rowsum at the end; "
                f"{'causal blocks skipped, diagonal mask added on TensorE; ' if causal else ''}"
                f"evictions balanced between VectorE and ScalarE")


def plan_fwd(ctx: AttnCtx, psum_banks: int, shape: tuple[int, int, int, int, int], dt: str, out_dt: str) -> FwdPlan:
    """The forward's plan for ``shape`` = (B, H, Sq, Sk, D) on a target with ``psum_banks`` banks."""
    B, H, Sq, Sk, D = shape
    nk = ceil_div(Sk, PMAX)
    step = min(KEY_STEP, nk * PMAX)
    nb = ceil_div(step, NMAX)
    # with bf16/fp16 operands P^T and Q^T/K^T are identity matmuls into the fp32 score banks
    # (``transpose_instr``), so a set holds only its score banks
    nsets = max(1, min(FWD_SETS, psum_banks // nb))
    # causal: a query tile whose keys fit WHOLE_BANKS banks takes them in one step (no rescaling)
    wmax = max(step, min(min(WHOLE_BANKS, nsets * nb) * NMAX, nk * PMAX)) if ctx.causal else step
    return FwdPlan(B, H, Sq, Sk, D, dt, out_dt, step, nb, dt != "float32", nsets,
                   ctx.causal and ctx.mask is None, wmax, CAUSAL_SETS if ctx.causal else nsets)


@register_lowering(FLASH_FWD, kind="kernel", supports=flash_supports)
def lower_flash_fwd(ctx: KernelContext, *args) -> None:
    """Check the case, plan it (:func:`plan_fwd`) and emit it (:class:`FwdEmitter`)."""
    n, sources, kb, out_tensors, out_meta, cfg = ctx.unpack()
    vals = call_args(n, ["query", "key", "value", "dropout_p", "is_causal"],
                     {"dropout_p": 0.0, "is_causal": False, "attn_mask": None, "scale": None})
    qn, kn, vn = vals["query"], vals["key"], vals["value"]
    qv, kv, vv = (x.meta["val"] for x in (qn, kn, vn))
    mv = vals["attn_mask"].meta["val"] if vals["attn_mask"] is not None else None
    why = unsupported(qv, kv, vv, vals["dropout_p"], mv)
    if why:
        raise LoweringError(f"flash attention: {why}")
    B, H, Sq, D = (int(x) for x in qv.shape)
    Sk = int(kv.shape[2])
    actx = attn_ctx(kb, sources, vals, (B, H, Sq, Sk), D)
    q, k, v = (head_input(kb, sources[x], tuple(x.meta["val"].shape)) for x in (qn, kn, vn))
    res = call_results(n, out_tensors, out_meta)
    out = head_output(*res[0]) if 0 in res else None
    lse = head_output(*res[1]) if 1 in res else None
    out_dt = res[0][0].dtype if 0 in res else "float32"
    plan = plan_fwd(actx, kb.target.psum_banks, (B, H, Sq, Sk, D), hw_dtype(sources[qn].base_dtype), out_dt)
    kb.plan = plan.describe(actx.causal)
    FwdEmitter(kb, actx, plan, (q, k, v), out, lse).emit()


class _Stats:
    """A query tile's float32 statistics columns: 0, 1 -scale * running max (ping-pong), 2 this
    step's max, 3 l, 4 alpha / 1/l, 8.. per-bank max. Only -scale * m is kept: it is the exp's bias,
    and -scale * max(a, b) = min(-scale * a, -scale * b) exactly (rounding is monotonic), so one
    tensor_scalar per step folds the new maximum into it."""

    def __init__(self, tile: Tile, rows: int) -> None:
        self.tile, self.rows = tile, rows
        self.negms = [self.col(0), self.col(1)]
        self.mstep, self.alpha = self.col(2), self.col(4)

    def col(self, c: int) -> TileRegion:
        return TileRegion(self.tile, (0, c), (self.rows, 1))


class FwdEmitter:
    """Emits the forward kernel of a :class:`FwdPlan`: constants once, then per (batch, head) the
    PSUM ring, the K^T / V groups and every query tile (:meth:`qtile`)."""

    def __init__(self, kb: KernelBuilder, ctx: AttnCtx, plan: FwdPlan, qkv: tuple[HeadTensor, ...],
                 out: HeadTensor | None, lse: HeadTensor | None, strict: bool = False, rep: int = 1) -> None:
        self.kb, self.ctx, self.plan = kb, ctx, plan
        #: strict: explicit softmax attention's semantics (``explicit.py``): non-finite Q/K rows made
        #: finite before any transpose, their NaNs put back through flags (``_Sanitizer``)
        self.strict = strict
        #: query heads per K/V head (grouped-query attention: head h reads K/V head h // rep)
        self.rep = rep
        self.san: _Sanitizer | None = None
        self.q, self.k, self.v = qkv
        self.out, self.lse = out, lse
        self.bal = _Balance(kb)
        self.ident: Tile | None = None
        self.trim: Tile | None = None
        self.negs: Tile | None = None
        #: the batch entry's logsumexp inputs (1 / l, -scale * m) as [query, tile, head] columns
        self.lsecols: tuple[Tile, Tile] | None = None

    def emit(self) -> None:
        kb, p = self.kb, self.plan
        self._constants()
        with maybe_loop(kb, p.B, "affine", "b") as b:
            # logsumexp inputs (l, m) of every (query, head) of this batch entry gathered as [query, tile, head]
            # and finished and stored once: torch's logsumexp is head-minor in memory, so only a store
            # spanning the heads moves more than 4 bytes per descriptor
            self.lsecols = None
            if self.lse is not None:
                self.lsecols = tuple(kb.tile((PMAX, p.nq, p.H), "float32", prefix=f"lse_{x}") for x in "lm")
                if p.Sq % PMAX:   # rows past the last tile's queries are never written: keep them finite
                    kb.memset(self.lsecols[0].region(PMAX, p.nq, p.H), value=1.0, engine=Engine.gpsimd)
                    kb.memset(self.lsecols[1].region(PMAX, p.nq, p.H), value=0.0, engine=Engine.gpsimd)
            with maybe_loop(kb, p.H // self.rep, "affine", "h") as hk:
                with maybe_loop(kb, self.rep, "affine", "r") as r:
                    self._head(b, hk * self.rep + r, hk)
            if self.lse is not None:
                _store_lse(kb, self.ctx, self.bal, self.lse, self.lsecols, b, p.Sq, p.nq, p.H)

    def _constants(self) -> None:
        """The identity (and the strict upper triangle, -HARD where key > query), built once, and
        -scale in a column: GpSimd may multiply two tiles (tensor_tensor) but not a tile by a constant
        (tensor_scalar there is rsqrt only), so -scale * m stays off the busy VectorE / ScalarE."""
        kb, p = self.kb, self.plan
        if p.tri or p.low:
            ident = self.ident = kb.tile((PMAX, PMAX), p.dt, prefix="ident")
            kb.iota(ident.region(PMAX, PMAX), pattern=[[1, PMAX]], offset=0, channel_multiplier=-1)
            if p.tri:
                self.trim = kb.tile((PMAX, PMAX), p.dt, prefix="tri")
                kb.tensor_scalar(self.trim.region(PMAX, PMAX), data=ident.region(PMAX, PMAX), operand0=0.0,
                                 operand1=-HARD, op0=AluOp.greater, op1=AluOp.multiply)
            kb.tensor_scalar(ident.region(PMAX, PMAX), data=ident.region(PMAX, PMAX), operand0=0.0, op0=AluOp.equal)
        if self.strict:
            self.san = _Sanitizer(kb, p.dt, p.D)
        self.negs = kb.tile((PMAX, 1), "float32", prefix="negscale")
        kb.memset(self.negs.region(PMAX, 1), value=float(-self.ctx.scale), engine=Engine.gpsimd)

    def _head(self, b, h, hk) -> None:
        """One (batch, head): PSUM is a ring of score banks (each with its P^T tile in SBUF); a query
        tile takes the next banks of the ring, so tiles of different widths (causal) share PSUM as
        they need it."""
        kb, p, ctx = self.kb, self.plan, self.ctx
        nring = p.nring
        ring = [kb.tile((PMAX, NMAX), "float32", "psum", prefix="s_ps") for _ in range(nring)]
        rpts = [kb.tile((PMAX, NMAX), p.dt, prefix="pt") for _ in range(nring)]
        rp = [kb.tile((PMAX, NMAX), p.dt, prefix="p") for _ in range(nring)]
        rssb = [kb.tile((PMAX, NMAX), "float32", prefix="s_sb") for _ in range(nring)] if ctx.mask else None
        sets = [dict(
            ident=self.ident if p.low else None, negs=self.negs,
            bias=kb.tile((PMAX, NMAX), "float32", prefix="bias") if ctx.mask else None,
            tmp=kb.tile((PMAX, NMAX), "float32", prefix="cbias") if ctx.needs_tmp else None,
            st=kb.tile((PMAX, 8 + p.nbmax), "float32", prefix="stats"),
            osb=kb.tile((PMAX, p.D + 1), "float32", prefix="o_acc"),
            oout=kb.tile((PMAX, p.D), p.out_dt, prefix="o_sb")) for _ in range(p.nsb)]
        kT, vr = self._key_groups(b, hk, ring, sets[0]["ident"])
        rq = _rows_per_partition(self.q, p.Sq, p.D, self.strict)
        qflags = kb.tile((PMAX, p.nq), "float32", prefix="qflags") if self.strict else None
        qTs = {}
        c = 0
        for i in range(p.nq):
            w = _tile_step(ctx, i, p.Sq, p.Sk, p.step, p.wmax)
            banks = [c + j for j in range(ceil_div(w, NMAX))]
            c += len(banks)
            ts = dict(sets[i % p.nsb], s=[ring[x % nring] for x in banks], p=[rp[x % nring] for x in banks],
                      pts=[rpts[x % nring] for x in banks], ssb=[rssb[x % nring] for x in banks] if rssb else None)
            qg = i // BLOCKS_PER_BANK
            if qg not in qTs:   # Q^T of this tile's 512 queries, transposed in the last bank it uses
                qTs[qg] = _load_group_T(kb, self.bal, self.q, b, h, NMAX * qg, min(NMAX, p.Sq - NMAX * qg), p.D,
                                        p.dt, _tp(ts, len(banks) - 1), rq, sets[0]["ident"], self.san,
                                        lambda jj, qg=qg: TileRegion(qflags, (0, BLOCKS_PER_BANK * qg + jj),
                                                                     (min(PMAX, p.Sq - PMAX * (BLOCKS_PER_BANK * qg + jj)), 1)))
            ts["qflag"] = TileRegion(qflags, (0, i), (min(PMAX, p.Sq - PMAX * i), 1)) if qflags is not None else None
            self.qtile(ts, qTs[qg], kT, vr, b, h, i, w)

    def _key_groups(self, b, h, ring: list, ident: Tile | None) -> tuple[list, list]:
        """K^T [D, 512-key group] and V rows [128, 4 x (D + 1)] per group of four 128-key blocks (one
        tile each, so a query tile waits only for the groups it reads); V carries a ones column, so
        P [V | 1] also yields the row sums."""
        kb, p, k, v, D = self.kb, self.plan, self.k, self.v, self.plan.D
        per = BLOCKS_PER_BANK
        kT, vr = [], []
        rk = _rows_per_partition(k, p.Sk, D, self.strict)
        for g in range(ceil_div(p.nk, per)):
            tp = (ring[(g % p.nsets) * p.nb + (g // p.nsets) % p.nb], 0)
            kflags = kb.tile((PMAX, per), "float32", prefix="kflags") if self.strict else None
            kT.append(_load_group_T(kb, self.bal, k, b, h, NMAX * g, min(NMAX, p.Sk - NMAX * g), D, p.dt, tp, rk,
                                    ident, self.san,
                                    lambda jj, g=g, kf=kflags: TileRegion(kf, (0, jj), (min(PMAX, p.Sk - PMAX * (per * g + jj)), 1))))
            vr.append(kb.tile((PMAX, per * (D + 1)), p.dt, prefix="v_rows"))
            kb.memset(vr[-1].region(PMAX, per * (D + 1)), value=1.0, engine=Engine.gpsimd)
            if kflags is not None:   # the ones column is 1 + flag: a non-finite key row makes every row sum NaN
                for j in range(g * per, min(p.nk, (g + 1) * per)):
                    cols, jj = min(PMAX, p.Sk - PMAX * j), j - g * per
                    kb.tensor_scalar(TileRegion(vr[-1], (0, (D + 1) * jj + D), (cols, 1)),
                                     data=TileRegion(kflags, (0, jj), (cols, 1)), operand0=1.0, op0=AluOp.add)
            for j in range(g * per, min(p.nk, (g + 1) * per)):
                cols, jj = min(PMAX, p.Sk - PMAX * j), j - g * per
                kb.dma(TileRegion(vr[-1], (0, (D + 1) * jj), (cols, D)), v.rows(b, h, PMAX * j, cols, D))
        return kT, vr

    def qtile(self, ts: dict, qTg: Tile, kT: list, vr: list, b, h, i: int, step: int) -> None:
        """One 128-query tile: per key step, S = Q K^T into the set's PSUM banks (:meth:`_scores`),
        the running max folded in (:meth:`_fold_max`), P, P^T and P [V | 1] (:meth:`_pv`); the output
        and row sum are rescaled across steps in SBUF (fp32) and divided once at the end
        (:meth:`_finish`)."""
        D = self.plan.D
        rows = min(PMAX, self.plan.Sq - PMAX * i)
        q0 = PMAX * i
        qT = _cols(qTg, PMAX * (i % BLOCKS_PER_BANK), rows, D)
        kend = min(self.plan.Sk, q0 + rows) if self.ctx.causal else self.plan.Sk   # causal: key k <= query q
        st = _Stats(ts["st"], rows)
        o_ps = TileRegion(ts["s"][0], (0, 0), (rows, D + 1))
        o_sb = ts["osb"].region(rows, D + 1)
        steps = list(range(0, kend, step))
        for si, k0 in enumerate(steps):
            srcs = self._scores(ts, st, qT, kT, b, h, q0, k0, min(step, kend - k0))
            negm = self._fold_max(st, si, len(srcs))
            self._pv(ts, srcs, rows, negm, o_ps, vr)
            if len(steps) > 1:   # o_sb = alpha * o_sb + P [V | 1] of this step (PSUM is reused next step)
                if si == 0:
                    self.bal.copy(o_sb, o_ps)
                else:
                    self.bal.scale_rows(o_sb, o_sb, st.alpha)
                    self.bal.tensor_tensor(o_sb, data1=o_sb, data2=o_ps, op=AluOp.add)
        self._finish(ts, st, o_sb if len(steps) > 1 else o_ps, st.negms[(len(steps) - 1) % 2], b, h, i)

    def _scores(self, ts: dict, st: _Stats, qT: TileRegion, kT: list, b, h, q0: int, k0: int, kw: int) -> list:
        """S = Q K^T of keys [k0, k0 + kw) into the tile's score banks, masked (causal diagonal block:
        a matmul accumulating -HARD above the diagonal; other masks added while leaving PSUM), and
        each bank's row max straight from PSUM (VectorE). Returns (scores, first key, keys) per bank."""
        kb, ctx, bal, D, rows = self.kb, self.ctx, self.bal, self.plan.D, st.rows
        nbk = ceil_div(kw, NMAX)
        srcs = []
        for bi in range(nbk):
            c0 = k0 + NMAX * bi
            cw = min(NMAX, k0 + kw - c0)
            sp = ts["s"][bi].region(rows, cw)
            kb.nc_matmul(sp, stationary=qT, moving=_cols(kT[c0 // NMAX], c0 % NMAX, cw, D), accumulate=False)
            if self.trim is not None and c0 + cw - 1 > q0:   # the diagonal block [q0, q0 + dw) of this bank
                dw = c0 + cw - q0
                kb.nc_matmul(TileRegion(ts["s"][bi], (0, q0 - c0), (rows, dw)),
                             stationary=self.ident.region(rows, rows), moving=self.trim.region(rows, dw),
                             accumulate=True)
            elif ctx.needs_mask(q0, rows, c0, cw):
                bias = ctx.bias(ts["bias"], ts["tmp"], b, h, q0, rows, c0, cw)
                s_sb = ts["ssb"][bi].region(rows, cw)
                bal.tensor_tensor(s_sb, data1=sp, data2=bias, op=AluOp.add)
                sp = s_sb
            srcs.append((sp, c0, cw))
            bal.tensor_reduce(st.mstep if nbk == 1 else st.col(8 + bi), data=sp, op=AluOp.maximum, axis=(1,),
                              keepdims=True)
        return srcs

    def _fold_max(self, st: _Stats, si: int, nbk: int) -> TileRegion:
        """-scale * the running max after step ``si`` (its ping-pong column, returned) and, from the
        second step on, alpha = exp(scale * (m_old - m_new)): how much the old partial results shrink."""
        bal, scale = self.bal, self.ctx.scale
        negm, negm_old = st.negms[si % 2], st.negms[(si + 1) % 2]
        if nbk == 2 and not si:   # -scale * max of the two banks' maxima, in one instruction
            bal.tensor_scalar(negm, data=st.col(8), operand0=st.col(9), operand1=-scale, op0=AluOp.maximum,
                              op1=AluOp.multiply)
        elif nbk > 1:
            bal.tensor_reduce(st.mstep, data=TileRegion(st.tile, (0, 8), (st.rows, nbk)), op=AluOp.maximum,
                              axis=(1,), keepdims=True)
        if si:   # -scale * max(m_step, m_old) = min(-scale * m_step, -scale * m_old)
            bal.tensor_scalar(negm, data=st.mstep, operand0=-scale, operand1=negm_old, op0=AluOp.multiply,
                              op1=AluOp.minimum)
            bal.activation(st.alpha, data=negm_old, bias=negm, op=ActFunc.exp, scale=-1.0)
        elif nbk == 1:
            bal.scale_rows(negm, st.mstep, -scale)
        return negm

    def _pv(self, ts: dict, srcs: list, rows: int, negm: TileRegion, o_ps: TileRegion, vr: list) -> None:
        """Per score bank: P = exp(scale * s - scale * m) in the matmul dtype (ScalarE), P^T in
        128-key blocks by TensorE into this bank (its scores are consumed), evicted at once, and
        P [V | 1] accumulated into ``o_ps``."""
        kb, bal, D = self.kb, self.bal, self.plan.D
        for bi, (sp, c0, cw) in enumerate(srcs):
            pr = TileRegion(ts["p"][bi], (0, 0), (rows, cw))
            bal.activation(pr, data=sp, bias=negm, op=ActFunc.exp, scale=self.ctx.scale)
            (ps, pc), pt = _tp(ts, bi), ts["pts"][bi]
            nblk = ceil_div(cw, PMAX)
            for t in range(nblk):
                kc = min(PMAX, cw - PMAX * t)
                kb.add(transpose_instr(TileRegion(ps, (0, pc + PMAX * t), (kc, rows)),
                                       TileRegion(ts["p"][bi], (0, PMAX * t), (rows, kc)),
                                       ts["ident"]))
            if rows == PMAX and cw % PMAX == 0:
                bal.copy(pt.region(PMAX, cw), TileRegion(ps, (0, pc), (PMAX, cw)))
            else:
                for t in range(nblk):
                    kc = min(PMAX, cw - PMAX * t)
                    bal.copy(TileRegion(pt, (0, PMAX * t), (kc, rows)), TileRegion(ps, (0, pc + PMAX * t), (kc, rows)))
            for t in range(nblk):
                kc = min(PMAX, cw - PMAX * t)
                kg = (c0 + PMAX * t) // PMAX
                kb.nc_matmul(o_ps, stationary=TileRegion(pt, (0, PMAX * t), (kc, rows)),
                             moving=TileRegion(vr[kg // BLOCKS_PER_BANK], (0, (D + 1) * (kg % BLOCKS_PER_BANK)),
                                               (kc, D + 1)),
                             accumulate=not (bi == 0 and t == 0))

    def _finish(self, ts: dict, st: _Stats, acc: TileRegion, negm_fin: TileRegion, b, h, i: int) -> None:
        """1 / l (no divide on the engines), read by ScalarE straight from the accumulator (PSUM or
        SBUF); the tile's logsumexp inputs; the output scaled by 1 / l (0 on rows left without keys)
        and stored."""
        kb, bal, ctx, D, rows = self.kb, self.bal, self.ctx, self.plan.D, st.rows
        alpha = st.alpha
        bal.activation(alpha, data=TileRegion(acc.tile, (0, D), (rows, 1)), op=ActFunc.reciprocal)
        if ts.get("qflag") is not None:   # strict: a non-finite query row's output is NaN, as eager's
            kb.tensor_tensor(alpha, data1=alpha, data2=ts["qflag"], op=AluOp.add, engine=Engine.gpsimd)
        if self.lsecols is not None:   # this tile's 1 / l and -scale * m join the batch entry's logsumexp inputs
            for t, x in zip(self.lsecols, (alpha, negm_fin)):
                kb.tensor_copy(TileRegion(t, (0, i, h), (rows, 1, 1)), src=x, engine=Engine.gpsimd)
        if self.out is not None:   # rows left without keys get output 0
            if ctx.rows_may_die:
                bal.tensor_scalar(alpha, data=negm_fin, operand0=-ctx.scale * DEAD, operand1=alpha, op0=AluOp.less,
                                  op1=AluOp.multiply)
            osb = ts["oout"].region(rows, D)
            bal.scale_rows(osb, TileRegion(acc.tile, (0, 0), (rows, D)), alpha)
            kb.dma(self.out.rows(b, h, PMAX * i, rows, D), osb)


def _tile_step(ctx, i: int, Sq: int, Sk: int, step: int, wmax: int) -> int:
    """Keys per online-softmax step of query tile ``i``: all of its keys when they fit ``wmax``."""
    if not ctx.causal:
        return step
    kend = min(Sk, PMAX * i + min(PMAX, Sq - PMAX * i))
    return kend if kend <= wmax else step


def _store_lse(kb, ctx, bal, lse, cols, b, Sq: int, nq: int, H: int) -> None:
    """lse = -(ln(1 / l) + (-scale * m)) of every head and query tile at once (one log, one add, one
    negation), stored with the heads innermost, where torch's logsumexp is contiguous. ``cols`` hold
    1 / l (the output's final scale) and -scale * m (the forward's running exp bias)."""
    lt, mt = cols
    lr, mr = lt.region(PMAX, nq, H), mt.region(PMAX, nq, H)
    bal.activation(lr, data=lr, op=ActFunc.log, scale=1.0)
    alive = None
    if ctx.rows_may_die:   # a row left without keys gets logsumexp 0 (as torch), so P = 0 in backward
        alive = kb.tile((PMAX, nq, H), "float32", prefix="lse_alive").region(PMAX, nq, H)
        bal.tensor_scalar(alive, data=mr, operand0=-ctx.scale * DEAD, op0=AluOp.less)
    kb.tensor_tensor(mr, data1=mr, data2=lr, op=AluOp.add, engine=Engine.gpsimd)
    bal.scale_rows(mr, mr, -1.0)
    if alive is not None:
        kb.tensor_tensor(mr, data1=mr, data2=alive, op=AluOp.multiply, engine=Engine.gpsimd)
    s0, s1, s2 = lse.st[:3]
    base = lse.off + b * s0
    full, rem = Sq // PMAX, Sq % PMAX
    if full:
        kb.dma(HBMAccess(lse.param, base, ((s2, PMAX), (PMAX * s2, full), (s1, H))),
               TileRegion(mt, (0, 0, 0), (PMAX, full, H)))
    if rem:
        kb.dma(HBMAccess(lse.param, base + full * PMAX * s2, ((s2, rem), (PMAX * s2, 1), (s1, H))),
               TileRegion(mt, (0, full, 0), (rem, 1, H)))
