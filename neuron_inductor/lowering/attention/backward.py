"""Flash attention backward on TensorE: ``aten._scaled_dot_product_flash_attention_for_cpu_backward``.

FA-2 (docs/hardware.md, "Flash attention"), per (batch, head), per 128-key tile (dK, dV accumulated over the query tiles in the
PSUM bank that also holds S and dP): S recomputed, P = exp(scale*s - lse) straight from the saved
logsumexp (0 on rows the forward left without keys, whose logsumexp is 0), dV += P^T dO, dP = dO V^T,
dS = scale * P * (dP - D) with D = rowsum(dO * O) precomputed per query tile, dK += dS^T Q, and
dQ += dS K accumulated in an SBUF fp32 buffer across key tiles (dS^T by a TensorE transpose). Masks,
engines and the rules the instructions follow are the forward's (``forward.py``).
"""
from __future__ import annotations

import torch.fx as fx

from ...ir import HBMAccess, TileRegion
from ..builder import KernelBuilder, ceil_div
from ..layout import LoweringError, hw_dtype
from ..loops import maybe_loop
from ..registry import KernelContext, register_lowering
from ...spec import ActFunc, AluOp, Engine
from ..transpose import tensor_transpose
from .common import (FLASH_BWD, PMAX, HeadTensor, attn_ctx, call_args, call_results, head_input, head_output,
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


@register_lowering(FLASH_BWD, kind="kernel", supports=flash_bwd_supports)
def lower_flash_bwd(ctx: KernelContext, *args) -> None:
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
    ctx = attn_ctx(kb, sources, vals, (B, H, Sq, Sk), D)
    go, q, k, v, o = (head_input(kb, sources[vals[x]], tuple(vals[x].meta["val"].shape))
                      for x in ("grad_out", "query", "key", "value", "out"))
    lse_src = sources[vals["logsumexp"]]
    if tuple(lse_src.meta.size) != (B, H, Sq) or lse_src.base_dtype != "float32":
        raise LoweringError("logsumexp layout")
    lse = HeadTensor(kb.param(lse_src.host, lse_src.base_extent, "float32"), lse_src.meta.storage_offset,
              tuple(lse_src.meta.stride) + (1,))
    res = call_results(n, out_tensors, out_meta)
    outs = {i: head_output(*res[i]) for i in res}
    g_dt = next(iter(res.values()))[0].dtype
    dt = hw_dtype(sources[vals["query"]].base_dtype)
    nq = ceil_div(Sq, PMAX)
    kb.plan = (f"flash attention backward (FA-2) [{B}x{H}] q {Sq} x k {Sk} x d {D} ({dt}); blocks of 128 "
               f"queries x {KEY_GROUP} keys: S and dP recomputed in PSUM, P from the saved logsumexp, dK/dV of "
               f"the key group accumulated in PSUM over the query tiles, dQ summed over the group in PSUM "
               f"then into an fp32 SBUF buffer{'; causal blocks skipped' if ctx.causal else ''}")
    with maybe_loop(kb, B, "affine", "b") as b, maybe_loop(kb, H, "affine", "h") as h:
        # one PSUM bank per set: S / dS^T in columns [0, G), dP / dQ in [G, 2G)
        # TensorE transposes write their input's dtype: bf16/fp16 ones go through a PSUM tile of it
        ntg = KEY_GROUP // PMAX
        # dK | dV of the key group accumulate in the same PSUM bank as S | dP when they fit, so a head
        # holds two banks even with the transpose tile
        merged = BWD_SETS == 1 and (2 * KEY_GROUP + 2 * ntg * D) * 4 <= kb.target.psum_bank_bytes
        sets = [dict(ac=kb.tile((PMAX, 2 * KEY_GROUP + (2 * ntg * D if merged else 0)), "float32", "psum",
                                prefix="s_dp_ps"),
                     tp=kb.tile((PMAX, 2 * KEY_GROUP), dt, "psum", prefix="t_ps") if dt != "float32" else None,
                     p=kb.tile((PMAX, KEY_GROUP), dt, prefix="p"),
                     dpm=kb.tile((PMAX, KEY_GROUP), "float32", prefix="dpm"),
                     ds=kb.tile((PMAX, KEY_GROUP), dt, prefix="ds"),
                     dst=kb.tile((PMAX, KEY_GROUP), dt, prefix="dsT"),
                     ssb=kb.tile((PMAX, KEY_GROUP), "float32", prefix="s_sb"),
                     bias=kb.tile((PMAX, KEY_GROUP), "float32", prefix="bias"),
                     tmp=kb.tile((PMAX, KEY_GROUP), "float32", prefix="cbias") if ctx.needs_tmp else None,
                     kr=kb.tile((PMAX, KEY_GROUP // PMAX * D), dt, prefix="k_rows"),
                     vr=kb.tile((PMAX, KEY_GROUP // PMAX * D), dt, prefix="v_rows"),
                     kT=kb.tile((PMAX, KEY_GROUP), dt, prefix="kT"),
                     vT=kb.tile((PMAX, KEY_GROUP), dt, prefix="vT"),
                     gsb=kb.tile((PMAX, KEY_GROUP // PMAX * D), g_dt, prefix="g_sb"))
                for _ in range(BWD_SETS)]
        if merged:
            dkv, dc = sets[0]["ac"], 2 * KEY_GROUP
        else:
            dkv, dc = kb.tile((PMAX, 2 * ntg * D), "float32", "psum", prefix="dkv_ps"), 0   # dK | dV
        # per-head query-side operands, kept for every key group
        qr = kb.tile((PMAX, nq * D), dt, prefix="q_rows")
        qT = kb.tile((PMAX, nq * PMAX), dt, prefix="qT")
        dor = kb.tile((PMAX, nq * D), dt, prefix="do_rows")
        doT = kb.tile((PMAX, nq * PMAX), dt, prefix="doT")
        nlse = kb.tile((PMAX, nq), "float32", prefix="neg_lse")
        di = kb.tile((PMAX, nq), "float32", prefix="di")
        dq = kb.tile((PMAX, nq * D), "float32", prefix="dq_acc")
        ot = kb.tile((PMAX, D), dt, prefix="o_rows")
        prod = kb.tile((PMAX, D), "float32", prefix="do_o")
        kb.memset(dq.region(PMAX, nq * D), value=0.0, engine=Engine.gpsimd)
        for i in range(nq):
            rows = min(PMAX, Sq - PMAX * i)
            ts = sets[i % len(sets)]
            qri = TileRegion(qr, (0, D * i), (rows, D))
            kb.dma(qri, q.rows(b, h, PMAX * i, rows, D))
            tp = ts["tp"] or ts["ac"]
            tensor_transpose(kb, tp.region(D, rows), qri)
            ctx.evict(TileRegion(qT, (0, PMAX * i), (D, rows)), tp.region(D, rows))
            dri = TileRegion(dor, (0, D * i), (rows, D))
            kb.dma(dri, go.rows(b, h, PMAX * i, rows, D))
            cT = TileRegion(tp, (0, KEY_GROUP), (D, rows))
            tensor_transpose(kb, cT, dri)
            ctx.evict(TileRegion(doT, (0, PMAX * i), (D, rows)), cT)
            col = TileRegion(nlse, (0, i), (rows, 1))
            kb.dma(col, HBMAccess(lse.param, lse.off + b * lse.st[0] + h * lse.st[1] + PMAX * i * lse.st[2],
                                  ((lse.st[2], rows), (1, 1))))
            kb.activation(col, data=col, op=ActFunc.copy, scale=-1.0)   # GpSimd: rsqrt only
            # D_i = rowsum(dO * O)
            kb.dma(ot.region(rows, D), o.rows(b, h, PMAX * i, rows, D))
            kb.tensor_tensor(prod.region(rows, D), data1=dri, data2=ot.region(rows, D), op=AluOp.multiply,
                             engine=Engine.gpsimd)
            kb.tensor_reduce(TileRegion(di, (0, i), (rows, 1)), data=prod.region(rows, D), op=AluOp.add, axis=(1,),
                             keepdims=True)
        blk = 0
        for gi, g0 in enumerate(range(0, Sk, KEY_GROUP)):
            gw = min(KEY_GROUP, Sk - g0)
            gs = sets[gi % len(sets)]
            nt = ceil_div(gw, PMAX)
            for t in range(nt):   # K, V rows of the group and their transposes
                kc = min(PMAX, gw - PMAX * t)
                for src, rows_t, tT, ps in ((k, gs["kr"], gs["kT"], 0), (v, gs["vr"], gs["vT"], KEY_GROUP)):
                    rr = TileRegion(rows_t, (0, D * t), (kc, D))
                    kb.dma(rr, src.rows(b, h, g0 + PMAX * t, kc, D))
                    nxt = sets[(gi + 1) % len(sets)]
                    tr = TileRegion(nxt["tp"] or nxt["ac"], (0, ps), (D, kc))
                    tensor_transpose(kb, tr, rr)
                    ctx.evict(TileRegion(tT, (0, PMAX * t), (D, kc)), tr)
            # causal: query tiles holding some q >= g0
            qtiles = [i for i in range(nq) if not ctx.causal or PMAX * i + min(PMAX, Sq - PMAX * i) - 1 >= g0]
            first_of, seen = {}, {}   # key tile -> first query tile / key rows written in PSUM
            for i in qtiles:
                ts = sets[blk % BWD_SETS]
                tp = ts["tp"] or ts["ac"]
                blk += 1
                rows = min(PMAX, Sq - PMAX * i)
                q0 = PMAX * i
                # keys of the group this tile sees (causal: up to its last query)
                cw = min(gw, q0 + rows - g0) if ctx.causal else gw
                ntt = ceil_div(cw, PMAX)
                sp = ts["ac"].region(rows, cw)
                kb.nc_matmul(sp, stationary=TileRegion(qT, (0, q0), (D, rows)), moving=gs["kT"].region(D, cw),
                             accumulate=False)
                if ctx.needs_mask(q0, rows, g0, cw):
                    bias = ctx.bias(ts["bias"], ts["tmp"], b, h, q0, rows, g0, cw)
                    s_sb = ts["ssb"].region(rows, cw)
                    kb.tensor_tensor(s_sb, data1=sp, data2=bias, op=AluOp.add)
                    sp = s_sb
                p = ts["p"].region(rows, cw)
                kb.activation(p, data=sp, bias=TileRegion(nlse, (0, i), (rows, 1)), op=ActFunc.exp, scale=ctx.scale)
                dp = TileRegion(ts["ac"], (0, KEY_GROUP), (rows, cw))
                kb.nc_matmul(dp, stationary=TileRegion(doT, (0, q0), (D, rows)), moving=gs["vT"].region(D, cw),
                             accumulate=False)
                dpm = ts["dpm"].region(rows, cw)
                kb.tensor_scalar(dpm, data=dp, operand0=TileRegion(di, (0, i), (rows, 1)), operand1=ctx.scale,
                                 op0=AluOp.subtract, op1=AluOp.multiply)
                ds = ts["ds"].region(rows, cw)
                kb.tensor_tensor(ds, data1=p, data2=dpm, op=AluOp.multiply, engine=Engine.gpsimd)
                for t in range(ntt):
                    kc = min(PMAX, cw - PMAX * t)
                    acc = first_of.setdefault(t, i) != i
                    seen[t] = max(seen.get(t, 0), kc)
                    kb.nc_matmul(TileRegion(dkv, (0, dc + D * (ntg + t)), (kc, D)), stationary=TileRegion(ts["p"], (0, PMAX * t), (rows, kc)), moving=TileRegion(dor, (0, D * i), (rows, D)), accumulate=acc, engine="tensor")
                    kb.nc_matmul(TileRegion(dkv, (0, dc + D * t), (kc, D)), stationary=TileRegion(ts["ds"], (0, PMAX * t), (rows, kc)), moving=TileRegion(qr, (0, D * i), (rows, D)), accumulate=acc, engine="tensor")
                    tensor_transpose(kb, TileRegion(tp, (0, PMAX * t), (kc, rows)),
                                     TileRegion(ts["ds"], (0, PMAX * t), (rows, kc)))
                if rows == PMAX and cw % PMAX == 0:
                    ctx.evict(ts["dst"].region(PMAX, cw), tp.region(PMAX, cw), "scalar")
                else:
                    for t in range(ntt):
                        kc = min(PMAX, cw - PMAX * t)
                        ctx.evict(TileRegion(ts["dst"], (0, PMAX * t), (kc, rows)),
                                  TileRegion(tp, (0, PMAX * t), (kc, rows)), "scalar")
                dqp = TileRegion(ts["ac"], (0, KEY_GROUP), (rows, D))   # dP is consumed by now
                for t in range(ntt):
                    kc = min(PMAX, cw - PMAX * t)
                    kb.nc_matmul(dqp, stationary=TileRegion(ts["dst"], (0, PMAX * t), (kc, rows)),
                                 moving=TileRegion(gs["kr"], (0, D * t), (kc, D)), accumulate=t > 0)
                acc_r = TileRegion(dq, (0, D * i), (rows, D))
                kb.tensor_tensor(acc_r, data1=acc_r, data2=dqp, op=AluOp.add)
            for which, c0 in ((1, 0), (2, ntg * D)):
                if which not in outs:
                    continue
                for t in range(nt):
                    kc = min(PMAX, gw - PMAX * t)
                    g = TileRegion(gs["gsb"], (0, D * t), (kc, D))
                    w = seen.get(t, 0)
                    if w < kc:  # keys no query sees (causal, Sk > Sq) get zero gradients
                        kb.memset(g, value=0.0, engine=Engine.gpsimd)
                    if w:
                        ctx.evict(TileRegion(gs["gsb"], (0, D * t), (w, D)), TileRegion(dkv, (0, dc + c0 + D * t), (w, D)))
                    kb.dma(outs[which].rows(b, h, g0 + PMAX * t, kc, D), g)
        if 0 in outs:
            for i in range(nq):
                rows = min(PMAX, Sq - PMAX * i)
                g = TileRegion(sets[i % len(sets)]["gsb"], (0, 0), (rows, D))
                ctx.evict(g, TileRegion(dq, (0, D * i), (rows, D)))
                kb.dma(outs[0].rows(b, h, PMAX * i, rows, D), g)
