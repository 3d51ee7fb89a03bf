"""Flash attention backward on TensorE: ``aten._scaled_dot_product_flash_attention_for_cpu_backward``.

FA-2 (docs/hardware.md, "Flash attention"), per (batch, head), per 128-key tile (dK, dV accumulated over the query tiles in the
PSUM bank that also holds S and dP): S recomputed, P = exp(scale*s - lse) straight from the saved
logsumexp (0 on rows the forward left without keys, whose logsumexp is 0), dV += P^T dO, dP = dO V^T,
dS = scale * P * (dP - D) with D = rowsum(dO * O) precomputed per query tile, dK += dS^T Q, and
dQ += dS K accumulated in an SBUF fp32 buffer across key tiles (dS^T by a TensorE transpose). Masks,
engines and the rules the instructions follow are the forward's (``forward.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import HBMAccess, Tile, TileRegion
from ..builder import KernelBuilder, ceil_div
from ..layout import LoweringError, hw_dtype
from ..loops import maybe_loop
from ..registry import KernelContext, register_lowering
from ...spec import ActFunc, AluOp, Engine
from ..transpose import tensor_transpose
from .common import (FLASH_BWD, PMAX, AttnCtx, HeadTensor, attn_ctx, call_args, call_results, head_input, head_output,
                     unsupported)

#: keys per backward block: one 128-key tile, so S | dP (2 x 128 fp32) and the group's dK | dV
#: (2 x head dim fp32) share one PSUM bank and, with the bf16/fp16 transpose tile, a head holds two
#: banks and four heads overlap (cost model at Llama shape: 256-key blocks needed three banks per
#: head with the transpose tile, two heads in flight, 3.2x of roofline against 2.0x)
KEY_GROUP = 128
BWD_SETS = 1


def flash_bwd_supports(grad_out, q, k, v, out, lse, dropout_p: float, is_causal: bool, *, attn_mask=None,
                       scale=None) -> bool | str:
    """The registry's question for the backward op's arguments (the forward's rules)."""
    return unsupported(q, k, v, dropout_p, attn_mask) or True


@dataclass(frozen=True)
class BwdPlan:
    """The backward kernel's shape and PSUM layout, decided before any instruction is emitted."""

    B: int
    H: int
    Sq: int
    Sk: int
    D: int
    dt: str        # matmul operands: the inputs' own precision
    g_dt: str      # the gradients' dtype
    merged: bool   # dK | dV of the key group share the PSUM bank of S | dP

    @property
    def nq(self) -> int:
        return ceil_div(self.Sq, PMAX)

    @property
    def ntg(self) -> int:
        """128-key tiles per key group."""
        return KEY_GROUP // PMAX

    def describe(self, causal: bool) -> str:
        return (f"flash attention backward (FA-2) [{self.B}x{self.H}] q {self.Sq} x k {self.Sk} x d {self.D} "
                f"({self.dt}); blocks of 128 queries x {KEY_GROUP} keys: S and dP recomputed in PSUM, P from the "
                f"saved logsumexp, dK/dV of the key group accumulated in PSUM over the query tiles, dQ summed over "
                f"the group in PSUM then into an fp32 SBUF buffer{'; causal blocks skipped' if causal else ''}")


def plan_bwd(psum_bank_bytes: int, shape: tuple[int, int, int, int, int], dt: str, g_dt: str) -> BwdPlan:
    """The backward's plan for ``shape`` = (B, H, Sq, Sk, D). dK | dV of the key group accumulate in
    the same PSUM bank as S | dP when they fit, so a head holds two banks even with the transpose tile."""
    D = shape[4]
    merged = BWD_SETS == 1 and (2 * KEY_GROUP + 2 * (KEY_GROUP // PMAX) * D) * 4 <= psum_bank_bytes
    return BwdPlan(*shape, dt, g_dt, merged)


@register_lowering(FLASH_BWD, kind="kernel", supports=flash_bwd_supports)
def lower_flash_bwd(ctx: KernelContext, *args) -> None:
    """Check the case, plan it (:func:`plan_bwd`) and emit it (:class:`BwdEmitter`)."""
    n, sources, kb, out_tensors, out_meta, cfg = ctx.unpack()
    vals = call_args(n, ["grad_out", "query", "key", "value", "out", "logsumexp", "dropout_p", "is_causal"],
                     {"attn_mask": None, "scale": None})
    qv, kv, vv = (vals[x].meta["val"] for x in ("query", "key", "value"))
    mv = vals["attn_mask"].meta["val"] if vals["attn_mask"] is not None else None
    why = unsupported(qv, kv, vv, vals["dropout_p"], mv)
    if why:
        raise LoweringError(f"flash attention backward: {why}")
    B, H, Sq, D = (int(x) for x in qv.shape)
    Sk = int(kv.shape[2])
    actx = attn_ctx(kb, sources, vals, (B, H, Sq, Sk), D)
    ops = tuple(head_input(kb, sources[vals[x]], tuple(vals[x].meta["val"].shape))
                for x in ("grad_out", "query", "key", "value", "out"))
    lse_src = sources[vals["logsumexp"]]
    if tuple(lse_src.meta.size) != (B, H, Sq) or lse_src.base_dtype != "float32":
        raise LoweringError("logsumexp layout")
    lse = HeadTensor(kb.param(lse_src.host, lse_src.base_extent, "float32"), lse_src.meta.storage_offset,
                     tuple(lse_src.meta.stride) + (1,))
    res = call_results(n, out_tensors, out_meta)
    outs = {i: head_output(*res[i]) for i in res}
    plan = plan_bwd(kb.target.psum_bank_bytes, (B, H, Sq, Sk, D), hw_dtype(sources[vals["query"]].base_dtype),
                    next(iter(res.values()))[0].dtype)
    kb.plan = plan.describe(actx.causal)
    BwdEmitter(kb, actx, plan, ops, lse, outs).emit()


class BwdEmitter:
    """Emits the backward kernel of a :class:`BwdPlan`: per (batch, head), the query-side operands of
    every query tile once (:meth:`_query_side`), then per key group its K / V rows (:meth:`_key_rows`),
    one block per query tile that sees it (:meth:`_block`) and its dK / dV (:meth:`_store_dkv`);
    dQ last (:meth:`_store_dq`)."""

    def __init__(self, kb: KernelBuilder, ctx: AttnCtx, plan: BwdPlan, ops: tuple[HeadTensor, ...],
                 lse: HeadTensor, outs: dict[int, HeadTensor]) -> None:
        self.kb, self.ctx, self.plan = kb, ctx, plan
        self.go, self.q, self.k, self.v, self.o = ops
        self.lse, self.outs = lse, outs

    def emit(self) -> None:
        with maybe_loop(self.kb, self.plan.B, "affine", "b") as b, maybe_loop(self.kb, self.plan.H, "affine", "h") as h:
            self._head(b, h)

    def _head(self, b, h) -> None:
        kb, p, D, nq = self.kb, self.plan, self.plan.D, self.plan.nq
        self.sets = self._alloc_sets()
        if p.merged:
            self.dkv, self.dc = self.sets[0]["ac"], 2 * KEY_GROUP
        else:
            self.dkv, self.dc = kb.tile((PMAX, 2 * p.ntg * D), "float32", "psum", prefix="dkv_ps"), 0   # dK | dV
        # per-head query-side operands, kept for every key group
        self.qr = kb.tile((PMAX, nq * D), p.dt, prefix="q_rows")
        self.qT = kb.tile((PMAX, nq * PMAX), p.dt, prefix="qT")
        self.dor = kb.tile((PMAX, nq * D), p.dt, prefix="do_rows")
        self.doT = kb.tile((PMAX, nq * PMAX), p.dt, prefix="doT")
        self.nlse = kb.tile((PMAX, nq), "float32", prefix="neg_lse")
        self.di = kb.tile((PMAX, nq), "float32", prefix="di")
        self.dq = kb.tile((PMAX, nq * D), "float32", prefix="dq_acc")
        ot = kb.tile((PMAX, D), p.dt, prefix="o_rows")
        prod = kb.tile((PMAX, D), "float32", prefix="do_o")
        kb.memset(self.dq.region(PMAX, nq * D), value=0.0, engine=Engine.gpsimd)
        for i in range(nq):
            self._query_side(b, h, i, ot, prod)
        self.blk = 0
        for gi, g0 in enumerate(range(0, p.Sk, KEY_GROUP)):
            self._key_group(b, h, gi, g0)
        if 0 in self.outs:
            self._store_dq(b, h)

    def _alloc_sets(self) -> list[dict]:
        """One PSUM bank per set: S / dS^T in columns [0, G), dP / dQ in [G, 2G) (and dK | dV after
        them when merged); TensorE transposes write their input's dtype, so bf16/fp16 ones go through
        a PSUM tile of it."""
        kb, p, D = self.kb, self.plan, self.plan.D
        return [dict(ac=kb.tile((PMAX, 2 * KEY_GROUP + (2 * p.ntg * D if p.merged else 0)), "float32", "psum",
                                prefix="s_dp_ps"),
                     tp=kb.tile((PMAX, 2 * KEY_GROUP), p.dt, "psum", prefix="t_ps") if p.dt != "float32" else None,
                     p=kb.tile((PMAX, KEY_GROUP), p.dt, prefix="p"),
                     dpm=kb.tile((PMAX, KEY_GROUP), "float32", prefix="dpm"),
                     ds=kb.tile((PMAX, KEY_GROUP), p.dt, prefix="ds"),
                     dst=kb.tile((PMAX, KEY_GROUP), p.dt, prefix="dsT"),
                     ssb=kb.tile((PMAX, KEY_GROUP), "float32", prefix="s_sb"),
                     bias=kb.tile((PMAX, KEY_GROUP), "float32", prefix="bias"),
                     tmp=kb.tile((PMAX, KEY_GROUP), "float32", prefix="cbias") if self.ctx.needs_tmp else None,
                     kr=kb.tile((PMAX, KEY_GROUP // PMAX * D), p.dt, prefix="k_rows"),
                     vr=kb.tile((PMAX, KEY_GROUP // PMAX * D), p.dt, prefix="v_rows"),
                     kT=kb.tile((PMAX, KEY_GROUP), p.dt, prefix="kT"),
                     vT=kb.tile((PMAX, KEY_GROUP), p.dt, prefix="vT"),
                     gsb=kb.tile((PMAX, KEY_GROUP // PMAX * D), p.g_dt, prefix="g_sb"))
                for _ in range(BWD_SETS)]

    def _query_side(self, b, h, i: int, ot: Tile, prod: Tile) -> None:
        """Query tile ``i``'s Q and dO rows and their transposes, -logsumexp, and D_i = rowsum(dO * O)."""
        kb, D, lse = self.kb, self.plan.D, self.lse
        rows = min(PMAX, self.plan.Sq - PMAX * i)
        ts = self.sets[i % len(self.sets)]
        qri = TileRegion(self.qr, (0, D * i), (rows, D))
        kb.dma(qri, self.q.rows(b, h, PMAX * i, rows, D))
        tp = ts["tp"] or ts["ac"]
        tensor_transpose(kb, tp.region(D, rows), qri)
        self.ctx.evict(TileRegion(self.qT, (0, PMAX * i), (D, rows)), tp.region(D, rows))
        dri = TileRegion(self.dor, (0, D * i), (rows, D))
        kb.dma(dri, self.go.rows(b, h, PMAX * i, rows, D))
        cT = TileRegion(tp, (0, KEY_GROUP), (D, rows))
        tensor_transpose(kb, cT, dri)
        self.ctx.evict(TileRegion(self.doT, (0, PMAX * i), (D, rows)), cT)
        col = TileRegion(self.nlse, (0, i), (rows, 1))
        kb.dma(col, HBMAccess(lse.param, lse.off + b * lse.st[0] + h * lse.st[1] + PMAX * i * lse.st[2],
                              ((lse.st[2], rows), (1, 1))))
        kb.activation(col, data=col, op=ActFunc.copy, scale=-1.0)   # GpSimd: rsqrt only
        kb.dma(ot.region(rows, D), self.o.rows(b, h, PMAX * i, rows, D))
        kb.tensor_tensor(prod.region(rows, D), data1=dri, data2=ot.region(rows, D), op=AluOp.multiply,
                         engine=Engine.gpsimd)
        kb.tensor_reduce(TileRegion(self.di, (0, i), (rows, 1)), data=prod.region(rows, D), op=AluOp.add, axis=(1,),
                         keepdims=True)

    def _key_group(self, b, h, gi: int, g0: int) -> None:
        """Keys [g0, g0 + KEY_GROUP): their rows, one block per query tile that sees them (causal:
        tiles holding some q >= g0), then their dK / dV."""
        p, sets = self.plan, self.sets
        gw = min(KEY_GROUP, p.Sk - g0)
        gs = sets[gi % len(sets)]
        self._key_rows(b, h, gs, sets[(gi + 1) % len(sets)], g0, gw)
        qtiles = [i for i in range(p.nq) if not self.ctx.causal or PMAX * i + min(PMAX, p.Sq - PMAX * i) - 1 >= g0]
        first_of, seen = {}, {}   # key tile -> first query tile / key rows written in PSUM
        for i in qtiles:
            ts = sets[self.blk % BWD_SETS]
            self.blk += 1
            self._block(b, h, ts, gs, i, g0, gw, first_of, seen)
        self._store_dkv(b, h, gs, g0, gw, seen)

    def _key_rows(self, b, h, gs: dict, nxt: dict, g0: int, gw: int) -> None:
        """K, V rows of the group and their transposes (through the next set's transpose tile)."""
        kb, D = self.kb, self.plan.D
        for t in range(ceil_div(gw, PMAX)):
            kc = min(PMAX, gw - PMAX * t)
            for src, rows_t, tT, ps in ((self.k, gs["kr"], gs["kT"], 0), (self.v, gs["vr"], gs["vT"], KEY_GROUP)):
                rr = TileRegion(rows_t, (0, D * t), (kc, D))
                kb.dma(rr, src.rows(b, h, g0 + PMAX * t, kc, D))
                tr = TileRegion(nxt["tp"] or nxt["ac"], (0, ps), (D, kc))
                tensor_transpose(kb, tr, rr)
                self.ctx.evict(TileRegion(tT, (0, PMAX * t), (D, kc)), tr)

    def _block(self, b, h, ts: dict, gs: dict, i: int, g0: int, gw: int, first_of: dict, seen: dict) -> None:
        """Query tile ``i`` x the key group: S recomputed (masked), P from the saved logsumexp, dP and
        dS = scale * P * (dP - D_i), then :meth:`_accumulate`."""
        kb, ctx, D = self.kb, self.ctx, self.plan.D
        rows = min(PMAX, self.plan.Sq - PMAX * i)
        q0 = PMAX * i
        # keys of the group this tile sees (causal: up to its last query)
        cw = min(gw, q0 + rows - g0) if ctx.causal else gw
        sp = ts["ac"].region(rows, cw)
        kb.nc_matmul(sp, stationary=TileRegion(self.qT, (0, q0), (D, rows)), moving=gs["kT"].region(D, cw),
                     accumulate=False)
        if ctx.needs_mask(q0, rows, g0, cw):
            bias = ctx.bias(ts["bias"], ts["tmp"], b, h, q0, rows, g0, cw)
            s_sb = ts["ssb"].region(rows, cw)
            kb.tensor_tensor(s_sb, data1=sp, data2=bias, op=AluOp.add)
            sp = s_sb
        p = ts["p"].region(rows, cw)
        kb.activation(p, data=sp, bias=TileRegion(self.nlse, (0, i), (rows, 1)), op=ActFunc.exp, scale=ctx.scale)
        dp = TileRegion(ts["ac"], (0, KEY_GROUP), (rows, cw))
        kb.nc_matmul(dp, stationary=TileRegion(self.doT, (0, q0), (D, rows)), moving=gs["vT"].region(D, cw),
                     accumulate=False)
        dpm = ts["dpm"].region(rows, cw)
        kb.tensor_scalar(dpm, data=dp, operand0=TileRegion(self.di, (0, i), (rows, 1)), operand1=ctx.scale,
                         op0=AluOp.subtract, op1=AluOp.multiply)
        ds = ts["ds"].region(rows, cw)
        kb.tensor_tensor(ds, data1=p, data2=dpm, op=AluOp.multiply, engine=Engine.gpsimd)
        self._accumulate(ts, gs, i, rows, cw, first_of, seen)

    def _accumulate(self, ts: dict, gs: dict, i: int, rows: int, cw: int, first_of: dict, seen: dict) -> None:
        """dV += P^T dO and dK += dS^T Q in PSUM per key tile; dS^T by TensorE, evicted; dQ += dS K in
        PSUM (dP is consumed by now), added into the fp32 SBUF buffer."""
        kb, D, dkv, dc, ntg = self.kb, self.plan.D, self.dkv, self.dc, self.plan.ntg
        tp = ts["tp"] or ts["ac"]
        ntt = ceil_div(cw, PMAX)
        for t in range(ntt):
            kc = min(PMAX, cw - PMAX * t)
            acc = first_of.setdefault(t, i) != i
            seen[t] = max(seen.get(t, 0), kc)
            kb.nc_matmul(TileRegion(dkv, (0, dc + D * (ntg + t)), (kc, D)),
                         stationary=TileRegion(ts["p"], (0, PMAX * t), (rows, kc)),
                         moving=TileRegion(self.dor, (0, D * i), (rows, D)), accumulate=acc, engine="tensor")
            kb.nc_matmul(TileRegion(dkv, (0, dc + D * t), (kc, D)),
                         stationary=TileRegion(ts["ds"], (0, PMAX * t), (rows, kc)),
                         moving=TileRegion(self.qr, (0, D * i), (rows, D)), accumulate=acc, engine="tensor")
            tensor_transpose(kb, TileRegion(tp, (0, PMAX * t), (kc, rows)),
                             TileRegion(ts["ds"], (0, PMAX * t), (rows, kc)))
        if rows == PMAX and cw % PMAX == 0:
            self.ctx.evict(ts["dst"].region(PMAX, cw), tp.region(PMAX, cw), "scalar")
        else:
            for t in range(ntt):
                kc = min(PMAX, cw - PMAX * t)
                self.ctx.evict(TileRegion(ts["dst"], (0, PMAX * t), (kc, rows)),
                               TileRegion(tp, (0, PMAX * t), (kc, rows)), "scalar")
        dqp = TileRegion(ts["ac"], (0, KEY_GROUP), (rows, D))   # dP is consumed by now
        for t in range(ntt):
            kc = min(PMAX, cw - PMAX * t)
            kb.nc_matmul(dqp, stationary=TileRegion(ts["dst"], (0, PMAX * t), (kc, rows)),
                         moving=TileRegion(gs["kr"], (0, D * t), (kc, D)), accumulate=t > 0)
        acc_r = TileRegion(self.dq, (0, D * i), (rows, D))
        kb.tensor_tensor(acc_r, data1=acc_r, data2=dqp, op=AluOp.add)

    def _store_dkv(self, b, h, gs: dict, g0: int, gw: int, seen: dict) -> None:
        """dK (result 1) and dV (result 2) of the key group out of PSUM and stored; keys no query sees
        (causal, Sk > Sq) get zero gradients."""
        kb, D = self.kb, self.plan.D
        for which, c0 in ((1, 0), (2, self.plan.ntg * D)):
            if which not in self.outs:
                continue
            for t in range(ceil_div(gw, PMAX)):
                kc = min(PMAX, gw - PMAX * t)
                g = TileRegion(gs["gsb"], (0, D * t), (kc, D))
                w = seen.get(t, 0)
                if w < kc:
                    kb.memset(g, value=0.0, engine=Engine.gpsimd)
                if w:
                    self.ctx.evict(TileRegion(gs["gsb"], (0, D * t), (w, D)),
                                   TileRegion(self.dkv, (0, self.dc + c0 + D * t), (w, D)))
                kb.dma(self.outs[which].rows(b, h, g0 + PMAX * t, kc, D), g)

    def _store_dq(self, b, h) -> None:
        """dQ (result 0) of every query tile, from the fp32 SBUF buffer."""
        D = self.plan.D
        for i in range(self.plan.nq):
            rows = min(PMAX, self.plan.Sq - PMAX * i)
            g = TileRegion(self.sets[i % len(self.sets)]["gsb"], (0, 0), (rows, D))
            self.ctx.evict(g, TileRegion(self.dq, (0, D * i), (rows, D)))
            self.kb.dma(self.outs[0].rows(b, h, PMAX * i, rows, D), g)
