"""Integer right shift by a constant (``x >> s``), exact on 32-bit words.

torch's ``>>`` on signed integers is arithmetic (the sign bit is copied in). The VectorE bitvec
``right_shift`` moves bit patterns; the simulator, like the documented bitvec semantics, treats it
as a logical shift. The arithmetic result is the logical one OR-ed with the sign fill
``-(2**(32 - s))`` where ``x < 0`` (a sign test and a product by a power of two, exact in fp32);
if the hardware shift already copies the sign, the OR changes nothing. int64 values (two words) are
declared fallbacks.
"""
from __future__ import annotations

import torch

from . import integers
from .builder import TVal
from .registry import register_pointwise

aten = torch.ops.aten


@register_pointwise(aten.__rshift__.Scalar, aten.bitwise_right_shift.Tensor_Scalar)
def _rshift(ctx, node, a: TVal, s) -> TVal:
    s = s.scalar if isinstance(s, TVal) else s
    dtype = node.meta["val"].dtype
    if not isinstance(s, int) or isinstance(s, bool) or dtype in (torch.int64, torch.bool) \
            or dtype.is_floating_point or dtype.is_complex:
        raise NotImplementedError(f"right shift of {dtype} by {s!r}")
    if a.kind == "scalar":
        return TVal.const(int(a.scalar) >> s)
    if a.hi is not None:
        raise NotImplementedError("right shift of an int64 value")
    s = min(max(s, 0), 31)
    x = integers.as_int32(ctx, a, a.kind)
    if s == 0:
        return TVal(a.kind, x, bound=integers.bound(a))
    kb = ctx.kb
    lsr = ctx.new(a.kind, "int32")
    kb.instr("vector", "tensor_scalar", lsr, {"data": x, "operand0": s}, op0="right_shift")
    fill = ctx.new(a.kind, "int32")
    kb.instr("vector", "tensor_scalar", fill, {"data": x, "operand0": 0.0,
                                               "operand1": -float(2 ** (32 - s))},
             op0="less", op1="multiply")
    out = ctx.new(a.kind, "int32")
    kb.instr("vector", "tensor_tensor", out, {"data1": lsr, "data2": fill}, op="bitwise_or")
    b = integers.bound(a)
    return TVal(a.kind, out, bound=None if b is None else (b >> s) + 1)
