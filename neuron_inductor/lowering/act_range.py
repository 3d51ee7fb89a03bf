"""``log``, ``sqrt`` and ``rsqrt`` on every float32 input, not only inside the activation tables.

ScalarE's ``log``/``sqrt``/``rsqrt`` are polynomial fits valid on a documented input range only
(``tbl-act-func``: log ``[2^-64, 2^64]``, sqrt ``[2^-116, 2^118]``, rsqrt ``[2^-87, 2^97]``; "may
produce invalid results outside that range"), and users take the log of an underflowed probability
or the square root of a zero gradient norm all the time. So:

* ``rsqrt(x)`` is the GpSimd ALU ``rsqrt`` (``tensor_scalar(op0=rsqrt)``, the note under
  ``tbl-aluop``: higher precision than ScalarE's, and the ALU table gives it no input range):
  ``rsqrt(0) = inf``, ``rsqrt(inf) = 0``, negative -> NaN, as IEEE and eager;
* ``sqrt(x) = 1 / rsqrt(x)`` (VectorE reciprocal): ``0 -> 0``, ``inf -> inf``, negative -> NaN;
* ``sin(x + shift)`` (``cos`` is ``shift = pi/2``: there is no ``cos`` activation) reduces the
  argument to ``[-pi, pi]``, where ScalarE's ``sin`` is valid, by ``k = round((x + shift) / 2pi)``
  and ``r = x - k * 2pi + shift`` with ``2pi`` split into :data:`TWO_PI_CHUNKS` (Cody-Waite): every
  chunk but the last has 6 significant bits, so each ``k * chunk`` is exact in float32 for ``|k| <
  2^18`` (``|x| < 1.6e6``, rotary angles of a million positions) and the result is as accurate as
  float32 ``sin`` of the same input; ``r`` is folded once more where the quotient rounded ``k`` the
  wrong way;
* ``log(x)``: inputs below ``2^-64`` are scaled up by ``2^100`` and inputs above ``2^64`` down by
  ``2^64`` (``f``), the scaled value is clamped into the table's range and ``log(x) = log(x * f) -
  ln(f)`` (``ln f`` a constant); then zero, negatives and ``+inf`` get IEEE's ``-inf``, NaN and ``+inf`` by adding
  ``1 / predicate - 1`` terms (0 where the predicate holds, ``inf`` where it does not).
"""
from __future__ import annotations

import math

import numpy as np

from ..spec.ops import ACT_RANGE, ActFunc
from ..spec import AluOp, Engine
from .builder import TVal

LOG_LO, LOG_HI, _ = ACT_RANGE[ActFunc.log]
#: scales that bring positive float32s below / above log's range into it: [2^-149, 2^-64) * 2^100
#: and (2^64, 2^128) * 2^-64 (a single 2^64 would leave the smallest normals and the denormals out)
UP, DOWN = 2.0 ** 100, 2.0 ** -64


def _ts(ctx, kind: str, data, op0: str, v0, op1: str | None = None, v1=None, engine: str = "vector"):
    dst = ctx.new(kind, "float32")
    ctx.kb.tensor_scalar(dst, data=data, op0=op0, operand0=v0, op1=op1, operand1=v1 if op1 is not None else None,
                         engine=engine)
    return dst


def _tt(ctx, kind: str, a, b, op: str, dtype: str = "float32"):
    dst = ctx.new(kind, dtype)
    ctx.kb.tensor_tensor(dst, data1=a, data2=b, op=op)
    return dst


def _inf_unless(ctx, kind: str, x, cmp: str, value: float):
    """0 where ``x <cmp> value`` holds, ``+inf`` where it does not (``1 / predicate - 1``)."""
    p = _ts(ctx, kind, x, cmp, value)
    r = _ts(ctx, kind, p, "reciprocal", 0.0, "subtract", 1.0)
    ctx.kb.release(p.tile)
    return r


def _two_pi_chunks(bits: int = 6, n: int = 6) -> tuple[float, ...]:
    """2pi as ``n`` chunks of ``bits`` significant bits and a float32 rest (sums to 2pi within 2^-57)."""
    out, rest = [], 2 * math.pi
    for _ in range(n):
        q = 2.0 ** (math.floor(math.log2(rest)) - bits + 1)
        c = math.floor(rest / q) * q
        out.append(c)
        rest -= c
    out.append(float(np.float32(rest)))
    return tuple(out)


TWO_PI_CHUNKS = _two_pi_chunks()
#: 1.5 * 2**23: adding and subtracting it rounds a float32 |t| < 2**22 to the nearest integer
_ROUND = 12582912.0
#: the largest float32 not above pi (ScalarE sin's valid range is [-pi, pi])
_PI_F32 = 3.1415925


def sin(ctx, a: TVal, shift: float, dtype: str) -> TVal:
    """``sin(x + shift)`` with the argument reduced to ``[-pi, pi]`` first (see the module text)."""
    if a.kind == "scalar":
        return TVal.const(math.sin(a.scalar + shift))
    kb, kind = ctx.kb, a.kind
    t = _ts(ctx, kind, a.region, "multiply", 1 / (2 * math.pi), "add", shift / (2 * math.pi))
    k = _ts(ctx, kind, t, "add", _ROUND, "subtract", _ROUND)   # round to nearest
    kb.release(t.tile)
    r = a.region
    last = len(TWO_PI_CHUNKS) - 1
    for i, c in enumerate(TWO_PI_CHUNKS):
        # the shift joins the last (smallest) term, after the exact large ones
        kc = _ts(ctx, kind, k, "multiply", c, "subtract", shift) if i == last else _ts(ctx, kind, k, "multiply", c)
        r2 = _tt(ctx, kind, r, kc, "subtract")
        kb.release(kc.tile)
        if r is not a.region:
            kb.release(r.tile)
        r = r2
    kb.release(k.tile)
    # k may be off by one where (x + shift) / 2pi rounds across a half: fold |r| > pi back by 2pi
    fold = ctx.new(kind, "float32")
    for cmp, limit, op in (("greater", _PI_F32, "subtract"), ("less", -_PI_F32, "add")):
        kb.tensor_scalar(fold, data=r, operand0=limit, operand1=2 * math.pi, op0=cmp, op1=AluOp.multiply)
        kb.tensor_tensor(r, data1=r, data2=fold, op=op)
    kb.release(fold.tile)
    kb.tensor_scalar(r, data=r, operand0=_PI_F32, operand1=-_PI_F32, op0=AluOp.minimum, op1=AluOp.maximum)
    dst = ctx.new(kind, dtype)
    kb.activation(dst, data=r, op=ActFunc.sin, scale=1.0)
    kb.release(r.tile)
    return TVal(kind, dst)


def rsqrt(ctx, a: TVal, dtype: str) -> TVal:
    if a.kind == "scalar":
        x = float(a.scalar)
        return TVal.const(math.inf if x == 0 else math.nan if x < 0 else 1 / math.sqrt(x))
    dst = ctx.new(a.kind, dtype)
    ctx.kb.tensor_scalar(dst, data=a.region, operand0=0.0, op0=AluOp.rsqrt, engine=Engine.gpsimd)
    return TVal(a.kind, dst)


def sqrt(ctx, a: TVal, dtype: str) -> TVal:
    if a.kind == "scalar":
        x = float(a.scalar)
        return TVal.const(math.nan if x < 0 else math.sqrt(x))
    r = rsqrt(ctx, a, "float32")
    dst = ctx.new(a.kind, dtype)
    ctx.kb.tensor_scalar(dst, data=r.region, operand0=0.0, op0=AluOp.reciprocal)
    ctx.kb.release(r.region.tile)
    return TVal(a.kind, dst)


def log(ctx, a: TVal, dtype: str) -> TVal:
    if a.kind == "scalar":
        x = float(a.scalar)
        return TVal.const(-math.inf if x == 0 else math.nan if x < 0 or x != x else math.log(x))
    kb, kind, x = ctx.kb, a.kind, a.region
    small = _ts(ctx, kind, x, "less", LOG_LO)                     # 1 below the range (denormals too)
    big = _ts(ctx, kind, x, "greater", LOG_HI)                    # 1 above it
    up = _ts(ctx, kind, small, "multiply", UP, "add", 1.0)        # 2^100 + 1 rounds to 2^100
    down = _ts(ctx, kind, x, "less_equal", LOG_HI, "add", DOWN)   # 1 + 2^-64 rounds to 1; else 2^-64
    f = _tt(ctx, kind, up, down, "multiply")
    xs = _tt(ctx, kind, x, f, "multiply")
    xc = _ts(ctx, kind, xs, "maximum", LOG_LO, "minimum", LOG_HI)  # 0, negatives, inf clamped in
    for t in (up, down, f, xs):
        kb.release(t.tile)
    y = ctx.new(kind, "float32")
    kb.activation(y, data=xc, op=ActFunc.log, scale=1.0)
    ks = _ts(ctx, kind, small, "multiply", math.log(UP))
    kb_ = _ts(ctx, kind, big, "multiply", -math.log(DOWN))
    y1 = _tt(ctx, kind, y, ks, "subtract")
    y2 = _tt(ctx, kind, y1, kb_, "add")
    for t in (small, big, xc, y, ks, kb_, y1):
        kb.release(t.tile)
    # IEEE at the edges: log(0) = -inf, log(x < 0) = NaN (-inf + inf), log(inf) = inf
    pos = _inf_unless(ctx, kind, x, "greater", 0.0)
    y3 = _tt(ctx, kind, y2, pos, "subtract")
    nonneg = _inf_unless(ctx, kind, x, "greater_equal", 0.0)
    y4 = _tt(ctx, kind, y3, nonneg, "add")
    finite = _inf_unless(ctx, kind, x, "less", math.inf)
    out = _tt(ctx, kind, y4, finite, "add", dtype)
    for t in (y2, pos, y3, nonneg, y4, finite):
        kb.release(t.tile)
    return TVal(kind, out)
