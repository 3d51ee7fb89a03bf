"""Integer add, subtract and multiply modulo 2**32 from operations the NKI docs call exact.

torch's int32 (and the words of its int64) wrap around modulo 2**32. The NKI docs promise GpSimd's
native ``tensor_tensor`` integer arithmetic "exact results for all 32-bit integer values" on
int32/uint32 tiles (``nki/api/nki/isa/__init__.py`` tensor_tensor) and say nothing of a result that
leaves 32 bits, so no instruction here may overflow (the simulator refuses one: spec rule
``int32-overflow``). Words are split into 16-bit halves with the bitvec ``and`` / logical
``right_shift`` (bit patterns, exact), combined with sums below 2**18 and, for products, 16 x 16-bit
products on uint32 tiles (below 2**32), and joined with ``left_shift`` (bits moved past bit 31 are
dropped: that is the wrap-around) and ``or``.
"""
from __future__ import annotations

_M16 = 0xFFFF


def ts(ctx, a, op0: str, v0, dtype: str, kind: str, op1: str | None = None, v1=None):
    dst = ctx.new(kind, dtype)
    srcs, attrs = {"data": a, "operand0": v0}, {"op0": op0}
    if op1 is not None:
        srcs["operand1"], attrs["op1"] = v1, op1
    ctx.kb.tensor_scalar(dst, **srcs, **attrs, engine="vector")
    return dst


def tt(ctx, op: str, a, b, dtype: str, kind: str, engine: str = "gpsimd"):
    dst = ctx.new(kind, dtype)
    ctx.kb.tensor_tensor(dst, data1=a, data2=b, op=op, engine=engine)
    return dst


def _free(ctx, *regions) -> None:
    for r in regions:
        ctx.kb.release(r.tile)


def _halves(ctx, w, kind: str, dtype: str = "int32", invert: bool = False) -> tuple:
    """(low, high) 16-bit halves of an int32 word region or a Python int, in [0, 2**16); of ``~w``
    with ``invert``."""
    if isinstance(w, int):
        w = ~w if invert else w
        out = []
        for v in (w & _M16, (w >> 16) & _M16):
            t = ctx.new(kind, dtype)
            ctx.kb.memset(t, v)
            out.append(t)
        return tuple(out)
    if invert:
        return (ts(ctx, w, "bitwise_and", _M16, dtype, kind, "bitwise_xor", _M16),
                ts(ctx, w, "right_shift", 16, dtype, kind, "bitwise_xor", _M16))
    return ts(ctx, w, "bitwise_and", _M16, dtype, kind), ts(ctx, w, "right_shift", 16, dtype, kind)


def _join(ctx, hi, lo, kind: str):
    """``(hi << 16) | (lo & 0xFFFF)`` as an int32 word: the bits of ``hi`` past 16 are dropped."""
    h = ts(ctx, hi, "left_shift", 16, "int32", kind)
    lo16 = ts(ctx, lo, "bitwise_and", _M16, "int32", kind)
    r = tt(ctx, "bitwise_or", h, lo16, "int32", kind, engine="vector")
    _free(ctx, h, lo16)
    return r


def add_words(ctx, xs: list, ys: list, kind: str, subtract: bool = False) -> list:
    """The words (low first) of ``x + y`` (``x - y`` = ``x + ~y + 1``) modulo 2**(32 * len(xs)); a
    word is an int32 region or a Python int. Every partial sum is below 2**17 + 2."""
    carry: object = 1 if subtract else 0
    out = []
    for x, y in zip(xs, ys):
        x0, x1 = _halves(ctx, x, kind)
        y0, y1 = _halves(ctx, y, kind, invert=subtract)
        parts = []
        for a, b in ((x0, y0), (x1, y1)):
            s = tt(ctx, "add", a, b, "int32", kind)
            if isinstance(carry, int):
                if carry:
                    s2 = ts(ctx, s, "add", float(carry), "int32", kind)  # below 2**24: exact in fp32
                    _free(ctx, s)
                    s = s2
            else:
                s2 = tt(ctx, "add", s, carry, "int32", kind)
                _free(ctx, s, carry)
                s = s2
            carry = ts(ctx, s, "right_shift", 16, "int32", kind)
            parts.append(s)
            _free(ctx, a, b)
        out.append(_join(ctx, parts[1], parts[0], kind))
        _free(ctx, *parts)
    if not isinstance(carry, int):
        _free(ctx, carry)
    return out


def add(ctx, x, y, kind: str, subtract: bool = False):
    """``x ± y`` modulo 2**32 of two int32 words (regions or Python ints)."""
    return add_words(ctx, [x], [y], kind, subtract)[0]


def _products(ctx, x, y, kind: str, high: bool) -> tuple:
    """16 x 16-bit partial products of two words on uint32 tiles (each below 2**32)."""
    x0, x1 = _halves(ctx, x, kind, "uint32")
    y0, y1 = _halves(ctx, y, kind, "uint32")
    p = {"00": tt(ctx, "multiply", x0, y0, "uint32", kind),
         "01": tt(ctx, "multiply", x0, y1, "uint32", kind),
         "10": tt(ctx, "multiply", x1, y0, "uint32", kind)}
    if high:
        p["11"] = tt(ctx, "multiply", x1, y1, "uint32", kind)
    _free(ctx, x0, x1, y0, y1)
    return p


def _mid(ctx, p: dict, kind: str):
    """``(p00 >> 16) + (p01 & 0xFFFF) + (p10 & 0xFFFF)``, below 3 * 2**16."""
    a = ts(ctx, p["01"], "bitwise_and", _M16, "uint32", kind)
    b = ts(ctx, p["10"], "bitwise_and", _M16, "uint32", kind)
    c = ts(ctx, p["00"], "right_shift", 16, "uint32", kind)
    s = tt(ctx, "add", a, b, "uint32", kind)
    m = tt(ctx, "add", s, c, "uint32", kind)
    _free(ctx, a, b, c, s)
    return m


def multiply(ctx, x, y, kind: str):
    """``x * y`` modulo 2**32 of two int32 words (a region, or a Python int for ``y``): the low 16
    bits of p00, and above them the low 16 bits of (p00 >> 16) + p01 + p10."""
    p = _products(ctx, x, y, kind, high=False)
    m = _mid(ctx, p, kind)
    r = _join(ctx, m, p["00"], kind)
    _free(ctx, m, *p.values())
    return r


def mulhi_u32(ctx, x, y, kind: str):
    """The high word of the unsigned 64-bit product of two int32 words (as an int32 bit pattern):
    p11 + (p01 >> 16) + (p10 >> 16) + (mid >> 16), each partial sum at most the exact high word,
    which is below 2**32."""
    p = _products(ctx, x, y, kind, high=True)
    m = _mid(ctx, p, kind)
    acc = p["11"]
    for t in (p["01"], p["10"], m):
        s = ts(ctx, t, "right_shift", 16, "uint32", kind)
        nxt = tt(ctx, "add", acc, s, "uint32", kind)
        _free(ctx, s, acc)
        acc = nxt
    r = ts(ctx, acc, "bitwise_or", 0, "int32", kind)  # a bitvec op: the bit pattern, as int32
    _free(ctx, acc, m, p["00"], p["01"], p["10"])
    return r
