"""Float -> integer casts that equal eager PyTorch on CPU for every input (docs/numerics.md).

The NKI docs define a float -> integer conversion only as a cast "from float32 to dst.dtype"
(``nki/api/nki/isa/__init__.py`` dma_copy, tensor_copy, tensor_tensor) and say neither how a
fractional value rounds nor what NaN, +-Inf or an out-of-range value become; the simulator refuses
the latter (spec rule ``float-int-conversion``). So the hardware conversion is only ever given
values inside int32, and the result does not depend on its rounding:

* ``i = int(z)`` may be ``trunc(z)`` or the integer next to it away from zero; ``f = float(i)``
  shows which (``(f - z) * z > 0``: rounded away, only possible below 2**23 where the fp32 math is
  exact), and one exact integer subtraction corrects it;
* eager CPU gives ``INT_MIN`` for NaN, +-Inf and ``|x| >= 2**31`` when casting to int32, and the
  narrower types wrap that int32 (NaN -> int8 is 0, 300.0 -> int8 is 44): the same selects here,
  then the usual wrap;
* int64: ``|x| < 2**63`` converts exactly (values beyond int32 as a word pair: ``hi = floor(t / 2**32)``,
  ``lo = t - hi * 2**32`` split into 16-bit halves, all exact in fp32), NaN, +-Inf and the rest give
  ``INT64_MIN`` as eager does.
"""
from __future__ import annotations

from .builder import TVal
from .int_wrap import tt, ts

I32_MIN = -(1 << 31)


def _select(ctx, pred, src, kind: str, dtype: str, fill, reverse: bool = False):
    """``pred ? src : fill`` (``reverse``: ``pred ? fill : src``) in a fresh tile."""
    dst = ctx.new(kind, dtype)
    ctx.kb.memset(dst, fill)
    attrs = {"reverse_pred": True} if reverse else {}
    ctx.kb.tensor_copy_predicated(dst, src=src, predicate=pred, **attrs, engine="vector")
    return dst


def _below(ctx, x, limit: float, kind: str):
    """``|x| < limit`` as a uint8 predicate (false for NaN)."""
    return ts(ctx, x, "abs", 0.0, "uint8", kind, "less", limit)


def _trunc32(ctx, z, kind: str):
    """int32 ``trunc(z)`` of an fp32 region with ``|z| < 2**31``, whichever neighbouring integer the
    hardware's conversion picks."""
    kb = ctx.kb
    i = ctx.new(kind, "int32")
    kb.copy("vector", i, z)
    f = ctx.new(kind, "float32")
    kb.copy("vector", f, i)
    d = tt(ctx, "subtract", f, z, "float32", kind, engine="vector")   # |d| < 1; 0 from 2**23 on
    p = tt(ctx, "multiply", d, z, "float32", kind, engine="vector")
    over = ts(ctx, p, "greater", 0.0, "float32", kind)                 # rounded away from zero
    sz = ts(ctx, z, "greater", 0.0, "float32", kind, "multiply", 2.0)
    sz2 = ts(ctx, sz, "subtract", 1.0, "float32", kind)                # sign(z) where over
    cf = tt(ctx, "multiply", over, sz2, "float32", kind, engine="vector")
    c = ctx.new(kind, "int32")
    kb.copy("vector", c, cf)
    r = tt(ctx, "subtract", i, c, "int32", kind)  # GpSimd, exact: c != 0 only where |i| < 2**23
    for t in (f, d, p, over, sz, sz2, cf, c, i):
        kb.release(t.tile)
    return r


def _as_f32(ctx, a: TVal):
    if a.region.dtype == "float32":
        return a.region
    x = ctx.new(a.kind, "float32")
    ctx.kb.copy("vector", x, a.region)  # bf16/fp16 -> fp32 is exact
    return x


def to_int32(ctx, a: TVal) -> TVal:
    """Eager's float -> int32: ``trunc(x)``, ``INT_MIN`` for NaN, +-Inf and ``|x| >= 2**31``."""
    k, x = a.kind, _as_f32(ctx, a)
    valid = _below(ctx, x, 2.0 ** 31, k)
    t = _trunc32(ctx, _select(ctx, valid, x, k, "float32", 0.0), k)
    return TVal(k, _select(ctx, valid, t, k, "int32", I32_MIN))


def to_int64(ctx, a: TVal) -> TVal:
    """Eager's float -> int64 as (lo, hi) int32 words: exact for ``|x| < 2**63``, else INT64_MIN."""
    k, x = a.kind, _as_f32(ctx, a)
    valid = _below(ctx, x, 2.0 ** 63, k)
    z = _select(ctx, valid, x, k, "float32", 0.0)
    small = _below(ctx, z, 2.0 ** 31, k)
    t32 = _trunc32(ctx, _select(ctx, small, z, k, "float32", 0.0), k)
    sign = ts(ctx, t32, "less", 0.0, "int32", k, "multiply", -1.0)
    # |z| >= 2**31 (an integer): hi = floor(z / 2**32), lo = z - hi * 2**32 in [0, 2**32)
    zb = _select(ctx, small, z, k, "float32", 0.0, reverse=True)
    q = ts(ctx, zb, "multiply", 2.0 ** -32, "float32", k)
    tq = _trunc32(ctx, q, k)
    fq = ctx.new(k, "float32")
    ctx.kb.copy("vector", fq, tq)
    gt = ctx.new(k, "int32")
    ctx.kb.copy("vector", gt, tt(ctx, "greater", fq, q, "float32", k, engine="vector"))
    hb = tt(ctx, "subtract", tq, gt, "int32", k)
    hf = ctx.new(k, "float32")
    ctx.kb.copy("vector", hf, hb)
    lo_f = tt(ctx, "subtract", zb, ts(ctx, hf, "multiply", 2.0 ** 32, "float32", k), "float32", k,
               engine="vector")
    lh = _trunc32(ctx, ts(ctx, lo_f, "multiply", 2.0 ** -16, "float32", k), k)
    lhf = ctx.new(k, "float32")
    ctx.kb.copy("vector", lhf, lh)
    ll_f = tt(ctx, "subtract", lo_f, ts(ctx, lhf, "multiply", 65536.0, "float32", k), "float32", k,
               engine="vector")
    ll = ctx.new(k, "int32")
    ctx.kb.copy("vector", ll, ll_f)  # an integer in [0, 2**16): exact
    lb = tt(ctx, "bitwise_or", ts(ctx, lh, "left_shift", 16, "int32", k), ll, "int32", k, engine="vector")
    lo = _select(ctx, small, t32, k, "int32", 0)
    ctx.kb.tensor_copy_predicated(lo, src=lb, predicate=small, reverse_pred=True, engine="vector")
    hi = _select(ctx, small, sign, k, "int32", 0)
    ctx.kb.tensor_copy_predicated(hi, src=hb, predicate=small, reverse_pred=True, engine="vector")
    neg = ctx.new(k, "int32")
    ctx.kb.memset(neg, I32_MIN)
    ctx.kb.tensor_copy_predicated(hi, src=neg, predicate=valid, reverse_pred=True, engine="vector")
    return TVal(k, lo, hi=hi)
