"""Integer values with torch's semantics on engines whose arithmetic ALU ops compute in fp32.

An arithmetic ALU op converts its operands to fp32, which is exact only below 2**24 (nki.api.shared
``tbl-aluop``). The hardware's exact integer paths are ``tensor_tensor`` on all-int32 tiles (GpSimd,
native 32-bit arithmetic) and the bitvec ops (VectorE, bit patterns). From these:

* add / subtract / multiply run on GpSimd over int32 tiles when the operands' bounds prove the
  result inside int32 (one instruction); otherwise they wrap modulo 2**32 as torch's int32 does,
  built from 16-bit halves that never overflow (``int_wrap``: the docs promise exact 32-bit results,
  not wrap-around); int8 / uint8 / int16 results are wrapped to their width with bit masks
  (uint8 100 + 200 = 44), never saturated;
* comparisons, max and min of values not proven to lie below 2**24 compare 16-bit digits taken with
  shifts and masks, each digit exact in fp32;
* an int64 value read from HBM keeps both 32-bit words; add and subtract carry between the words;
  comparisons, ``where`` and bitwise ops work on both words;
* an int64 multiply whose result may leave int32 is a word-pair product mod 2**64 (16-bit partial
  products, ``int_wrap``), or shift-and-add for a constant up to 16;
* what has no exact form here (an integer sum or max not proven exact in fp32) raises
  ``NotImplementedError``: the node becomes a declared fallback, run eagerly, logged and counted.

``TVal.bound`` carries a proven bound on ``|value|`` (from dtypes, constants and ``arange``) so the
common cases (bool masks, positions, narrow types) keep the one-instruction fp32 forms.
"""
from __future__ import annotations

import torch

from . import int_wrap
from .builder import TVal
from ..spec import AluOp

#: integers below this magnitude are exact in fp32
EXACT = 1 << 24
I32 = 1 << 31
_DTYPE_BOUND = {"uint8": 255, "int8": 128, "int16": 1 << 15, "uint16": (1 << 16) - 1, "int32": I32}
#: (mask, sign bit) of the torch integer types narrower than int32
_NARROW = {torch.uint8: (0xFF, 0), torch.int8: (0xFF, 0x80), torch.int16: (0xFFFF, 0x8000)}
INT_TILE_DTYPES = frozenset(_DTYPE_BOUND)


def is_int(v: TVal) -> bool:
    """``v`` holds integers (bool included)."""
    if v.kind == "scalar":
        return isinstance(v.scalar, (bool, int))
    return v.region.dtype in INT_TILE_DTYPES


def bound(v: TVal) -> int | None:
    """A bound on ``|v|``; None when unknown beyond 32 bits (an int64 with its high words)."""
    if v.kind == "scalar":
        return abs(int(v.scalar)) if isinstance(v.scalar, (bool, int)) else None
    if v.hi is not None:
        return None
    if v.bound is not None:
        return v.bound
    return _DTYPE_BOUND.get(v.region.dtype)


def exact_in_fp32(*vals: TVal) -> bool:
    return all(bound(v) is not None and bound(v) < EXACT for v in vals)


def _wrap32(x: int) -> int:
    return (x + I32) % (1 << 32) - I32


def _kind(*vals: TVal) -> str:
    return "full" if any(v.kind == "full" for v in vals) else "row"


# --- int32 tiles ------------------------------------------------------------------------------

def as_int32(ctx, v: TVal, kind: str, word: int = 0):
    """Word ``word`` (0 low, 1 high) of ``v`` as an int32 region of ``kind``, bit-exact."""
    kb = ctx.kb
    if v.kind == "scalar":
        dst = ctx.new(kind, "int32")
        x = int(v.scalar)
        kb.memset(dst, _wrap32(x >> 32) if word else _wrap32(x))
        return dst
    if word:
        r = v.hi if v.hi is not None else _sign_word(ctx, v)
    else:
        r = v.region
    if r.dtype != "int32":  # narrow integers and bools: exact through fp32
        t = ctx.new(v.kind, "int32")
        kb.copy("vector", t, r)
        r = t
    if v.kind == kind:
        return r
    return _broadcast_row(ctx, r, kind)


def _broadcast_row(ctx, r, kind: str):
    """An int32 row ``[P, 1]`` broadcast bit-exactly over a tile of ``kind``. A ``tensor_scalar``
    tile operand must be float32 (spec rule ``tensor-scalar-fp32-operand``; the NKI frontend refuses
    int32 ones even with bitvec operators) and fp32 is exact only below 2**24, so the word travels as
    two 16-bit halves, each broadcast by an exact fp32 add onto zeros and joined with a bitvec or:
    ``((hi ^ 0x8000) - 0x8000) * 2**16 | lo``."""
    kb = ctx.kb
    hb = _ts(ctx, "bitwise_xor", r, -I32, "int32", "row", "right_shift", 16)  # signed high half + 2**15
    hf, lf = ctx.new("row", "float32"), ctx.new("row", "float32")
    kb.copy("vector", hf, hb)
    kb.copy("vector", lf, _ts(ctx, "bitwise_and", r, 0xFFFF, "int32", "row"))
    hs = _ts(ctx, "subtract", hf, 32768.0, "float32", "row")
    zero = ctx.new(kind, "int32")
    kb.memset(zero, 0)
    top = _ts(ctx, "add", zero, hs, "int32", kind, "multiply", 65536.0)  # in [-2**31, 2**31 - 2**16]
    low = _ts(ctx, "add", zero, lf, "int32", kind)
    return _tt(ctx, "vector", "bitwise_or", top, low, "int32", kind)


def _sign_word(ctx, v: TVal):
    """The high word of a value that fits in int32: -1 where it is negative, else 0 (a sign test is
    exact in fp32)."""
    dst = ctx.new(v.kind, "int32")
    ctx.kb.tensor_scalar(dst, data=v.region, operand0=0.0, op0=AluOp.less, op1=AluOp.multiply, operand1=-1.0)
    return dst


def _tt(ctx, engine: str, op: str, a, b, dtype: str, kind: str):
    dst = ctx.new(kind, dtype)
    ctx.kb.tensor_tensor(dst, data1=a, data2=b, op=op, engine=engine)
    return dst


def _ts(ctx, op0: str, a, v0, dtype: str, kind: str, op1: str | None = None, v1=None,
        reverse0: bool = False):
    dst = ctx.new(kind, dtype)
    ctx.kb.tensor_scalar(dst, data=a, op0=op0, operand0=v0, reverse0=reverse0 or None, op1=op1 or None,
                         operand1=v1 if op1 else None)
    return dst


def wrap(ctx, v: TVal, dtype: torch.dtype) -> TVal:
    """``v`` (an int32 tile) reduced to the width of ``dtype`` with two's-complement wrap-around."""
    if dtype not in _NARROW or v.kind == "scalar":
        return v
    mask, sign = _NARROW[dtype]
    lim = mask if not sign else sign
    if sign and bound(v) is not None and bound(v) < sign:  # |v| < 2**(bits-1): in range already
        return v
    if not sign:
        r = _ts(ctx, "bitwise_and", v.region, mask, "int32", v.kind)
    else:  # ((v & mask) ^ sign) - sign
        r = _ts(ctx, "bitwise_and", v.region, mask, "int32", v.kind, "bitwise_xor", sign)
        r = _ts(ctx, "subtract", r, float(sign), "int32", v.kind)
    return TVal(v.kind, r, bound=lim)


# --- arithmetic -------------------------------------------------------------------------------

def arith(ctx, op: str, a: TVal, b: TVal, dtype: torch.dtype) -> TVal:
    """``a op b`` (add, subtract, multiply) with the integer result type ``dtype``."""
    kind = _kind(a, b)
    ba, bb = bound(a), bound(b)
    res = None if None in (ba, bb) else (ba + bb if op != "multiply" else ba * bb)
    if dtype == torch.int64 and (res is None or res >= I32):
        if op == "multiply":
            c, v = (b, a) if b.kind == "scalar" else (a, b)
            if c.kind == "scalar" and abs(int(c.scalar)) <= _SHIFT_ADD_MAX:
                return _pair_times(ctx, v, int(c.scalar), kind)
            return _pair_multiply(ctx, a, b, kind)
        return _pair_addsub(ctx, op, a, b, kind)
    if res is not None and res < I32:  # proven inside int32: one native instruction is exact
        dst = _tt(ctx, "gpsimd", op, as_int32(ctx, a, kind), as_int32(ctx, b, kind), "int32", kind)
        return wrap(ctx, TVal(kind, dst, bound=res), dtype)
    x = as_int32(ctx, a, kind)
    y = _wrapped(b) if b.kind == "scalar" else as_int32(ctx, b, kind)
    dst = int_wrap.multiply(ctx, x, y, kind) if op == "multiply" else \
        int_wrap.add(ctx, x, y, kind, subtract=op == "subtract")
    return wrap(ctx, TVal(kind, dst), dtype)


def _wrapped(c: TVal) -> int:
    """A scalar's low 32-bit word as a Python int (what its int32 tile would hold)."""
    return _wrap32(int(c.scalar))


def _pair_addsub(ctx, op: str, a: TVal, b: TVal, kind: str) -> TVal:
    """64-bit add / subtract on (low, high) int32 word pairs with a carry (borrow) word."""
    xs = [as_int32(ctx, a, kind), as_int32(ctx, a, kind, 1)]
    ys = [as_int32(ctx, b, kind, w) for w in (0, 1)]
    lo, hi = int_wrap.add_words(ctx, xs, ys, kind, subtract=op == "subtract")
    return TVal(kind, lo, hi=hi)


#: int64 products by constants up to this are exact shift-and-add chains of word-pair adds
_SHIFT_ADD_MAX = 16


def _pair_times(ctx, v: TVal, c: int, kind: str) -> TVal:
    """``v * c`` on int64 word pairs for a small constant: doublings and adds (wrapping mod 2**64)."""
    if c == 0:
        return TVal.const(0)
    acc, p, n = None, v, abs(c)
    while n:
        if n & 1:
            acc = p if acc is None else _pair_addsub(ctx, "add", acc, p, kind)
        n >>= 1
        if n:
            p = _pair_addsub(ctx, "add", p, p, kind)
    if c < 0:
        acc = _pair_addsub(ctx, "subtract", TVal.const(0), acc, kind)
    if acc is v and v.kind != kind:
        acc = TVal(kind, as_int32(ctx, v, kind), hi=as_int32(ctx, v, kind, 1))
    return acc


def _pair_multiply(ctx, a: TVal, b: TVal, kind: str) -> TVal:
    """``a * b`` mod 2**64 on (low, high) int32 word pairs: low = lo(al * bl); high = hi(al * bl) +
    al * bh + ah * bl (mod 2**32), the wrap-around torch's int64 multiply has."""
    al, bl = as_int32(ctx, a, kind), as_int32(ctx, b, kind)
    ah, bh = as_int32(ctx, a, kind, 1), as_int32(ctx, b, kind, 1)
    lo = int_wrap.multiply(ctx, al, bl, kind)
    cross = int_wrap.add(ctx, int_wrap.multiply(ctx, al, bh, kind), int_wrap.multiply(ctx, ah, bl, kind), kind)
    hi = int_wrap.add(ctx, int_wrap.mulhi_u32(ctx, al, bl, kind), cross, kind)
    return TVal(kind, lo, hi=hi)


def negate(ctx, a: TVal, dtype: torch.dtype) -> TVal:
    return arith(ctx, "subtract", TVal.const(0), a, dtype)


def absolute(ctx, a: TVal, dtype: torch.dtype) -> TVal:
    if a.hi is not None:  # both words: select -a where the high word is negative
        neg = _pair_addsub(ctx, "subtract", TVal.const(0), a, a.kind)
        return select(ctx, _ts(ctx, "less", a.hi, 0.0, "uint8", a.kind), neg, a, a.kind)
    neg = negate(ctx, a, dtype)
    out = TVal(a.kind, ctx.new(a.kind, "int32"), bound=bound(a))
    ctx.kb.copy("vector", out.region, as_int32(ctx, a, a.kind))  # a fresh tile: written below
    pred = _ts(ctx, "less", a.region, 0.0, "uint8", a.kind)  # a sign test is exact in fp32
    ctx.kb.tensor_copy_predicated(out.region, src=as_int32(ctx, neg, a.kind), predicate=pred)
    return wrap(ctx, out, dtype)


# --- comparisons ------------------------------------------------------------------------------

def _digits(ctx, r, signed: bool, kind: str) -> list:
    """A 32-bit word as two 16-bit digits, most significant first, ordered like the word (signed:
    the sign bit flipped, so the digits order as the signed value)."""
    if signed:
        hi = _ts(ctx, "bitwise_xor", r, -I32, "int32", kind, "right_shift", 16)
    else:
        hi = _ts(ctx, "right_shift", r, 16, "int32", kind)
    lo = _ts(ctx, "bitwise_and", r, 0xFFFF, "int32", kind)
    return [hi, lo]


def _words(ctx, v: TVal, wide: bool, kind: str) -> list:
    """(region, signed) words of ``v``, most significant first."""
    lo = as_int32(ctx, v, kind)
    return [(as_int32(ctx, v, kind, 1), True), (lo, False)] if wide else [(lo, True)]


def _greater(ctx, da: list, db: list, kind: str):
    """``da > db`` for digit lists (lexicographic), as a uint8 0/1 region."""
    gt = None
    for x, y in reversed(list(zip(da, db))):
        g = _tt(ctx, "vector", "greater", x, y, "uint8", kind)
        if gt is None:
            gt = g
            continue
        e = _tt(ctx, "vector", "equal", x, y, "uint8", kind)
        m = _tt(ctx, "vector", "multiply", e, gt, "uint8", kind)
        new = _tt(ctx, "vector", "add", g, m, "uint8", kind)
        for t in (g, e, m, gt):  # dead temporaries: recycled (SBUF holds whole rows)
            ctx.kb.release(t.tile)
        gt = new
    return gt


def _equal(ctx, a: TVal, b: TVal, wide: bool, kind: str):
    """``a == b`` bit-exactly: the words' xors or-ed together, compared with 0 (exact in fp32). A row
    operand is broadcast first (a bitvec ``tensor_scalar`` takes no integer tile operand)."""
    d = None
    for w in ((0, 1) if wide else (0,)):
        x = as_int32(ctx, a, kind, w)
        y = _tt(ctx, "vector", "bitwise_xor", x, as_int32(ctx, b, kind, w), "int32", kind)
        d = y if d is None else _tt(ctx, "vector", "bitwise_or", d, y, "int32", kind)
    return _ts(ctx, "equal", d, 0.0, "uint8", kind)


_FLIP = {"greater": "less", "less": "greater", "greater_equal": "less_equal",
         "less_equal": "greater_equal", "equal": "equal", "not_equal": "not_equal"}


def _small(v: TVal) -> bool:
    return bound(v) is not None and bound(v) < EXACT


def compare(ctx, op: str, a: TVal, b: TVal) -> TVal | None:
    """Exact ``a op b`` of two integer values, or None when the one-instruction fp32 form is exact:
    both fit in int32 and one is proven below 2**24 (rounding the other to fp32 cannot cross it), or
    a sign / zero test against 0."""
    narrow = all(v.hi is None and (v.kind != "scalar" or -I32 <= int(v.scalar) < I32) for v in (a, b))
    if narrow and (_small(a) or _small(b)):
        return None
    zero = [v for v in (a, b) if v.kind == "scalar" and v.scalar == 0]
    if zero and all(v.hi is None for v in (a, b)):
        return None
    if zero and (a.hi is not None or b.hi is not None):
        w, z_op = (a, op) if b.kind == "scalar" else (b, _FLIP[op])
        return _wide_vs_zero(ctx, z_op, w)
    if a.hi is not None and b.hi is None and _small(b) and b.kind != "scalar":
        return _small_vs_wide(ctx, _FLIP[op], b, a)
    if b.hi is not None and a.hi is None and _small(a) and a.kind != "scalar":
        return _small_vs_wide(ctx, op, a, b)
    kind = _kind(a, b)
    wide = a.hi is not None or b.hi is not None or any(
        v.kind == "scalar" and not -I32 <= int(v.scalar) < I32 for v in (a, b))
    if op in ("equal", "not_equal"):
        r = _equal(ctx, a, b, wide, kind)
        if op == "not_equal":
            r = _ts(ctx, "subtract", r, 1.0, "uint8", kind, reverse0=True)
        return TVal(kind, r, bound=1)
    wa, wb = _words(ctx, a, wide, kind), _words(ctx, b, wide, kind)
    da = [d for r, s in wa for d in _digits(ctx, r, s, kind)]
    db = [d for r, s in wb for d in _digits(ctx, r, s, kind)]
    if op in ("greater", "less_equal"):
        r = _greater(ctx, da, db, kind)
    else:  # less, greater_equal
        r = _greater(ctx, db, da, kind)
    for d in da + db:
        ctx.kb.release(d.tile)
    if op in ("less_equal", "greater_equal"):
        r = _ts(ctx, "subtract", r, 1.0, "uint8", kind, reverse0=True)
    return TVal(kind, r, bound=1)


def _wide_vs_zero(ctx, op: str, w: TVal) -> TVal:
    """``w op 0`` for an int64 with high words: the sign is the high word's (a sign test, exact in
    fp32); zero-ness is ``lo | hi == 0``."""
    k = w.kind
    if op in ("less", "greater_equal"):
        return TVal(k, _ts(ctx, op, w.hi, 0.0, "uint8", k), bound=1)
    z = _ts(ctx, "equal", _tt(ctx, "vector", "bitwise_or", w.region, w.hi, "int32", k), 0.0, "uint8", k)
    if op in ("equal", "not_equal"):
        r = z if op == "equal" else _ts(ctx, "subtract", z, 1.0, "uint8", k, reverse0=True)
        return TVal(k, r, bound=1)
    neg = _ts(ctx, "less", w.hi, 0.0, "uint8", k)
    le = _tt(ctx, "vector", "logical_or", neg, z, "uint8", k)          # w <= 0
    r = le if op == "less_equal" else _ts(ctx, "subtract", le, 1.0, "uint8", k, reverse0=True)
    return TVal(k, r, bound=1)


def _small_vs_wide(ctx, op: str, s: TVal, w: TVal) -> TVal:
    """``s op w`` with |s| < 2**24 and ``w`` an int64 with its high words. Where ``w`` fits in int32
    (high word = sign of the low word) the fp32 compare of ``s`` with the low word is exact; elsewhere
    |w| >= 2**31 > |s| and the sign of ``w`` decides. Only the fp32 compare and one blend run over
    the wider operand when ``w`` is a row (an index, a position), as in one-hot compares."""
    kind, wk = _kind(s, w), w.kind
    sgn = _ts(ctx, "less", w.region, 0.0, "float32", wk, "multiply", -1.0)
    inr = _tt(ctx, "vector", "equal", w.hi, sgn, "float32", wk)        # w fits in int32
    if op in ("equal", "not_equal"):
        out = None if op == "equal" else 1.0
    else:  # outside int32: s < w exactly where w > 0
        pos = _ts(ctx, "greater_equal", w.hi, 0.0, "float32", wk)
        out = pos if op in ("less", "less_equal") else \
            _ts(ctx, "subtract", pos, 1.0, "float32", wk, reverse0=True)
    if out is None:
        c = 0.0
    elif out == 1.0:
        c = _ts(ctx, "subtract", inr, 1.0, "float32", wk, reverse0=True)
    else:  # out * (1 - in)
        c = _ts(ctx, "subtract", inr, 1.0, "float32", wk, reverse0=True)
        c = _tt(ctx, "vector", "multiply", c, out, "float32", wk)
    sr = as_int32(ctx, s, s.kind) if s.region.dtype not in INT_TILE_DTYPES else s.region
    if s.kind == w.kind:
        r = _tt(ctx, "vector", op, sr, w.region, "float32", kind)
    elif s.kind == "full":  # w a row: per-partition operand
        lo = ctx.new("row", "float32")
        ctx.kb.copy("vector", lo, w.region)
        r = _ts(ctx, op, sr, lo, "float32", kind)
    else:
        lo = as_int32(ctx, w, kind)
        r = _tt(ctx, "vector", op, as_int32(ctx, s, kind), lo, "float32", kind)
    if wk == kind:
        res = _tt(ctx, "vector", "multiply", r, inr, "float32", kind)
        res = res if isinstance(c, float) else _tt(ctx, "vector", "add", res, c, "float32", kind)
        dst = ctx.new(kind, "uint8")
        ctx.kb.copy("vector", dst, res)
        return TVal(kind, dst, bound=1)
    dst = ctx.new(kind, "uint8")  # w a row, s full: r * in + c in one instruction
    ctx.kb.tensor_scalar(dst, data=r, operand0=inr, operand1=c, op0=AluOp.multiply, op1=AluOp.add)
    return TVal(kind, dst, bound=1)


def select(ctx, pred, a: TVal, b: TVal, kind: str) -> TVal:
    """``pred ? a : b`` word by word (a uint8 predicate region of ``kind``)."""
    wide = a.hi is not None or b.hi is not None
    words = []
    for w in ((0, 1) if wide else (0,)):
        out = ctx.new(kind, "int32")
        ctx.kb.copy("vector", out, as_int32(ctx, b, kind, w))
        ctx.kb.tensor_copy_predicated(out, src=as_int32(ctx, a, kind, w), predicate=pred)
        words.append(out)
    ba, bb = bound(a), bound(b)
    return TVal(kind, words[0], hi=words[1] if wide else None,
                bound=None if None in (ba, bb) else max(ba, bb))


def minmax(ctx, op: str, a: TVal, b: TVal) -> TVal | None:
    """Exact integer maximum / minimum, or None when the fp32 form is exact."""
    if exact_in_fp32(a, b):
        return None
    kind = _kind(a, b)
    cmp = "greater" if op == "maximum" else "less"
    gt = compare(ctx, cmp, a, b)
    if gt is None:  # the one-instruction fp32 comparison is exact (``compare`` proved it)
        if a.kind == "scalar" or b.kind == "scalar":
            t, z, rev = (a, b, False) if b.kind == "scalar" else (b, a, True)
            pred = _ts(ctx, cmp, as_int32(ctx, t, kind), float(z.scalar), "uint8", kind, reverse0=rev)
        else:
            pred = _tt(ctx, "vector", cmp, as_int32(ctx, a, kind), as_int32(ctx, b, kind), "uint8", kind)
    else:
        pred = gt.region if gt.kind == kind else as_int32(ctx, gt, kind)
    return select(ctx, pred, a, b, kind)


def bitwise(ctx, op: str, a: TVal, b: TVal) -> TVal:
    """Bitwise and / or / xor on every word."""
    kind = _kind(a, b)
    wide = a.hi is not None or b.hi is not None
    lo = _tt(ctx, "vector", op, as_int32(ctx, a, kind), as_int32(ctx, b, kind), "int32", kind)
    hi = _tt(ctx, "vector", op, as_int32(ctx, a, kind, 1), as_int32(ctx, b, kind, 1), "int32", kind) \
        if wide else None
    return TVal(kind, lo, hi=hi)


def nonzero(ctx, a: TVal) -> TVal:
    """``a != 0`` as a uint8 0/1 tile (both words of an int64)."""
    r = _ts(ctx, "not_equal", a.region, 0.0, "uint8", a.kind)
    if a.hi is not None:
        h = _ts(ctx, "not_equal", a.hi, 0.0, "uint8", a.kind)
        r = _tt(ctx, "vector", "logical_or", r, h, "uint8", a.kind)
    return TVal(a.kind, r, bound=1)


def to_float(ctx, a: TVal):
    """An int64 with high words as fp32: (hi + [lo < 0]) * 2**32 + lo with lo signed, so a value that
    fits in int32 is rounded once, like torch's cast; larger ones are rounded twice."""
    kind = a.kind
    neg = _ts(ctx, "less", a.region, 0.0, "float32", kind)
    h = _tt(ctx, "vector", "add", a.hi, neg, "float32", kind)
    h = _ts(ctx, "multiply", h, 4294967296.0, "float32", kind)
    return _tt(ctx, "vector", "add", a.region, h, "float32", kind)
