"""Integer right shift by a constant (``x >> s``), exact on 32-bit words.

torch's ``>>`` on signed integers is arithmetic (the sign bit is copied in). The VectorE bitvec
``right_shift`` moves bit patterns; the simulator, like the documented bitvec semantics, treats it
as a logical shift. The arithmetic result is the logical one OR-ed with the sign fill
``-(2**(32 - s))`` where ``x < 0`` (a sign test and a product by a power of two, exact in fp32);
if the hardware shift already copies the sign, the OR changes nothing. An int64 value (two words)
shifts its high word arithmetically and its low word logically, OR-ed with the high word's low bits
moved up (``left_shift``).
"""
from __future__ import annotations

import torch

from . import integers
from .builder import TVal
from .registry import register_lowering
from ..spec import AluOp

aten = torch.ops.aten


def _arith32(ctx, kind: str, x, s: int):
    """Arithmetic right shift of an int32 region by 0 < s < 32: the logical shift OR the sign fill."""
    kb = ctx.kb
    lsr = ctx.new(kind, "int32")
    kb.tensor_scalar(lsr, data=x, operand0=s, op0=AluOp.right_shift)
    fill = ctx.new(kind, "int32")
    kb.tensor_scalar(fill, data=x, operand0=0.0, operand1=-float(2 ** (32 - s)), op0=AluOp.less, op1=AluOp.multiply)
    out = ctx.new(kind, "int32")
    kb.tensor_tensor(out, data1=lsr, data2=fill, op=AluOp.bitwise_or)
    kb.release(lsr.tile)
    kb.release(fill.tile)
    return out


def _rshift64(ctx, a: TVal, s: int) -> TVal:
    """int64 word pair ``(hi, lo) >> s``: the low word takes the high word's bits shifted in."""
    kind, kb = a.kind, ctx.kb
    s = min(max(s, 0), 63)
    lo, hi = integers.as_int32(ctx, a, kind, 0), integers.as_int32(ctx, a, kind, 1)
    if s == 0:
        return TVal(kind, lo, hi=hi)
    if s >= 32:
        return TVal(kind, hi if s == 32 else _arith32(ctx, kind, hi, s - 32), hi=_arith32(ctx, kind, hi, 31))
    lsr = ctx.new(kind, "int32")
    kb.tensor_scalar(lsr, data=lo, operand0=s, op0=AluOp.right_shift)
    carry = ctx.new(kind, "int32")
    kb.tensor_scalar(carry, data=hi, operand0=32 - s, op0=AluOp.left_shift)
    new_lo = ctx.new(kind, "int32")
    kb.tensor_tensor(new_lo, data1=lsr, data2=carry, op=AluOp.bitwise_or)
    kb.release(lsr.tile)
    kb.release(carry.tile)
    return TVal(kind, new_lo, hi=_arith32(ctx, kind, hi, s))


@register_lowering(aten.__rshift__.Scalar, aten.bitwise_right_shift.Tensor_Scalar, kind="pointwise")
def _rshift(ctx, node, a: TVal, s) -> TVal:
    s = s.scalar if isinstance(s, TVal) else s
    dtype = node.meta["val"].dtype
    if not isinstance(s, int) or isinstance(s, bool) or dtype == torch.bool \
            or dtype.is_floating_point or dtype.is_complex:
        raise NotImplementedError(f"right shift of {dtype} by {s!r}")
    if a.kind == "scalar":
        return TVal.const(int(a.scalar) >> s)
    if dtype == torch.int64:
        return _rshift64(ctx, a, s)
    s = min(max(s, 0), 31)
    x = integers.as_int32(ctx, a, a.kind)
    if s == 0:
        return TVal(a.kind, x, bound=integers.bound(a))
    out = _arith32(ctx, a.kind, x, s)
    b = integers.bound(a)
    return TVal(a.kind, out, bound=None if b is None else (b >> s) + 1)
