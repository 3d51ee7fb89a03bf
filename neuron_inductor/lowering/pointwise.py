"""Elementwise lowerings: one small function per ATen op family, emitting engine instructions on tiles.

Values inside a fused kernel are ``TVal``s: full [rows, cols] tiles, [rows, 1] rows (constant along the
free axis, e.g. a reduction result) or Python scalars. Binary ops pick the instruction by operand kinds:
tile-tile -> ``tensor_tensor`` (VectorE), tile-row or tile-scalar -> ``tensor_scalar`` (the row is a
per-partition operand, which is how the hardware broadcasts along the free axis). Transcendentals go to
ScalarE ``activation``. Float intermediates are kept in fp32 tiles; an explicit cast keeps the target
dtype so rounding matches eager.
"""
from __future__ import annotations

import math
import operator
from dataclasses import replace

import torch

from . import act_range, float_to_int, integers
from ..ir import TileRegion
from ..spec import AluOp
from ..spec.instrs import PREDICATE_DTYPES
from .builder import FLOAT_DTYPES, TVal
from .engine_balance import charge, scale_on_scalar
from .registry import REDUCTIONS, register_lowering

aten = torch.ops.aten

_PY = {"add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
       "divide": operator.truediv, "maximum": max, "minimum": min,
       "equal": operator.eq, "not_equal": operator.ne, "greater": operator.gt,
       "greater_equal": operator.ge, "less": operator.lt, "less_equal": operator.le,
       "logical_and": lambda a, b: bool(a) and bool(b), "logical_or": lambda a, b: bool(a) or bool(b),
       "logical_xor": lambda a, b: bool(a) != bool(b), "power": operator.pow,
       "bitwise_and": operator.and_, "bitwise_or": operator.or_, "bitwise_xor": operator.xor}
_BITVEC = {"bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "invert"}
_COMPARE = {"equal", "not_equal", "greater", "greater_equal", "less", "less_equal"}


def tile_dtype(val) -> str:
    """The on-chip dtype a node's value is computed in."""
    dt = val.dtype
    if dt.is_floating_point:
        return "float32"
    if dt == torch.bool:
        return "uint8"
    return "int32"


def _imm(op: str, v):
    """A compile-time operand typed as the instruction needs it: arithmetic ALU operands are fp32,
    bitvec operands integers."""
    if isinstance(v, (bool, int, float)):
        return int(v) if op in _BITVEC else float(v)
    return v


def _f32_row(ctx, v: TVal) -> TileRegion:
    """A row operand of an arithmetic ``tensor_scalar``: those must be float32 tiles."""
    if v.region.dtype == "float32":
        return v.region
    t = ctx.new("row", "float32")
    ctx.kb.copy("vector", t, v.region)
    return t


def _spread(ctx, v: TVal, kind: str) -> TVal:
    """A scalar or row operand written out as a ``kind`` tile of float32 (for instructions that
    take no scalar operand)."""
    t = ctx.new(kind, "float32")
    if v.kind == "scalar":
        ctx.kb.memset(t, float(v.scalar))
    else:
        ctx.kb.memset(t, 0.0)
        ctx.kb.tensor_scalar(t, data=t, operand0=_f32_row(ctx, v), op0=AluOp.add)
    return TVal(kind, t)


def binary(ctx, op: str, a: TVal, b: TVal, dtype: str, out: torch.dtype | None = None) -> TVal:
    """``a op b`` into a ``dtype`` tile; ``out`` is the torch result dtype (integer results take
    the exact integer forms of ``integers``)."""
    if a.kind == "scalar" and b.kind == "scalar":
        return TVal.const(_PY[op](a.scalar, b.scalar))
    if integers.is_int(a) and integers.is_int(b):
        if out is not None and out != torch.bool and not out.is_floating_point \
                and op in ("add", "subtract", "multiply"):
            return integers.arith(ctx, op, a, b, out)
        if op in _BITVEC:
            return integers.bitwise(ctx, op, a, b)
        if op in _COMPARE:
            r = integers.compare(ctx, op, a, b)
            if r is not None:
                return r
        if op in ("maximum", "minimum"):
            r = integers.minmax(ctx, op, a, b)
            if r is not None:
                return r
    kind = "full" if "full" in (a.kind, b.kind) else "row"
    if op == "power" and a.kind != b.kind:
        # power is a GpSimd tensor_tensor op only (tensor_tensor docstring; tensor_scalar takes
        # GpSimd for rsqrt alone): the narrower operand is spread to a tile first
        a, b = (a if a.kind == kind else _spread(ctx, a, kind)), (b if b.kind == kind else _spread(ctx, b, kind))
    dst = ctx.new(kind, dtype)
    # power runs on GpSimd (tensor_tensor docstring); every other ALU op here on VectorE
    engine = "gpsimd" if op == "power" else "vector"
    on_scalar = scale_on_scalar(ctx, op, a, b, kind, dtype) if engine == "vector" else None
    if on_scalar is not None:
        t, c = on_scalar
        ctx.kb.activation(dst, data=t.region, scale=c, op="copy", engine="scalar")
        return TVal(kind, dst)
    charge(ctx, "vector", 2 if a.kind == b.kind and dtype != "bfloat16" else 1)
    if a.kind == b.kind:
        ctx.kb.tensor_tensor(dst, data1=a.region, data2=b.region, op=op, engine=engine)
    elif a.kind == kind:   # tile op (row|scalar)
        other = _f32_row(ctx, b) if b.kind == "row" else _imm(op, b.scalar)
        ctx.kb.tensor_scalar(dst, data=a.region, op0=op, operand0=other, engine=engine)
    else:                  # (row|scalar) op tile
        other = _f32_row(ctx, a) if a.kind == "row" else _imm(op, a.scalar)
        ctx.kb.tensor_scalar(dst, data=b.region, op0=op, operand0=other, reverse0=True, engine=engine)
    r = TVal(kind, dst)
    if op in _COMPARE or op.startswith("logical_"):
        r = replace(r, bound=1)
    elif op in ("maximum", "minimum") and integers.is_int(a) and integers.is_int(b) \
            and None not in (integers.bound(a), integers.bound(b)):
        r = replace(r, bound=max(integers.bound(a), integers.bound(b)))  # |max(a, b)| <= max(|a|, |b|)
    return r


def unary(ctx, func: str, a: TVal, dtype: str, scale: float = 1.0, py=None) -> TVal:
    if a.kind == "scalar":
        if py is None:
            raise NotImplementedError(func)
        return TVal.const(py(a.scalar))
    dst = ctx.new(a.kind, dtype)
    charge(ctx, "scalar", 1)
    ctx.kb.activation(dst, data=a.region, op=func, scale=scale)
    return TVal(a.kind, dst)


def _operand(v):
    """A scalar argument as the instruction operand: lowerings receive Python scalars as ``TVal``s."""
    if isinstance(v, TVal):
        return v.scalar if v.kind == "scalar" else v.region
    return v


def scalar_op(ctx, a: TVal, op0: str, v0, dtype: str, op1: str | None = None, v1=None) -> TVal:
    if isinstance(v0, TVal) and v0.kind == "row":
        v0 = _f32_row(ctx, v0)
    if isinstance(v1, TVal) and v1.kind == "row":
        v1 = _f32_row(ctx, v1)
    v0, v1 = _operand(v0), _operand(v1)
    if a.kind == "scalar":
        r = _PY[op0](a.scalar, v0)
        return TVal.const(_PY[op1](r, v1) if op1 else r)
    dst = ctx.new(a.kind, dtype)
    ctx.kb.tensor_scalar(dst, data=a.region, op0=op0, operand0=_imm(op0, v0), op1=op1 or None,
                         operand1=_imm(op1, v1) if op1 else None)
    return TVal(a.kind, dst)


def copy(ctx, a: TVal, dtype: str, kind: str | None = None) -> TVal:
    """Copy (and cast) ``a`` into a new tile; with ``kind='full'`` a row or scalar is broadcast along
    the free axis. Integer broadcasts are bit-exact; an int64's high words are copied along."""
    kind = kind or a.kind
    dst = ctx.new(kind, dtype)
    if a.kind == "scalar":
        ctx.kb.memset(dst, a.scalar)
        return TVal(kind, dst)
    if a.kind == kind:
        ctx.kb.copy("vector", dst, a.region)
    elif dtype in FLOAT_DTYPES:  # row -> full: 0.0 + row (an fp32 per-partition operand)
        ctx.kb.memset(dst, 0.0)
        ctx.kb.tensor_scalar(dst, data=dst, operand0=_f32_row(ctx, a), op0=AluOp.add)
    else:  # integers: 0 | row, bit-exact, then a cast if narrower
        ctx.kb.copy("vector", dst, integers.as_int32(ctx, a, kind))
    hi = None
    if a.hi is not None and dtype == "int32":
        hi = integers.as_int32(ctx, a, kind, 1)
        if hi is a.hi:
            hi = ctx.new(kind, "int32")
            ctx.kb.copy("vector", hi, a.hi)
    return TVal(kind, dst, hi=hi, bound=a.bound)


#: ops for which eager casts a Python scalar operand to a low-precision tensor's dtype first (mul and
#: div keep it in fp32 "opmath"); for comparisons this decides ties, e.g. bf16 x >= -0.3
_ROUNDS_SCALAR = {"add", "subtract", "equal", "not_equal", "greater", "greater_equal", "less",
                  "less_equal"}


def _round_scalar(node, v: TVal) -> TVal:
    """``v`` rounded like eager rounds a scalar operand of a bf16/fp16 op."""
    if v.kind != "scalar" or not isinstance(v.scalar, float):
        return v
    dts = [a.meta["val"].dtype for a in node.args if isinstance(a, torch.fx.Node)]
    low = [d for d in dts if d in (torch.bfloat16, torch.float16)]
    if low and len(set(dts)) == 1:
        return TVal.const(torch.tensor(v.scalar, dtype=low[0]).item())
    return v


def _wrap_scalar(node, v: TVal) -> TVal:
    """An integer scalar operand of an integer tensor op, converted to the tensor's dtype the way
    eager converts it (wrapping: ``int32_tensor > 2**33`` compares with 0)."""
    if v.kind != "scalar" or isinstance(v.scalar, bool) or not isinstance(v.scalar, int):
        return v
    dts = {a.meta["val"].dtype for a in node.args if isinstance(a, torch.fx.Node)}
    if len(dts) != 1:
        return v
    dt = dts.pop()
    if dt.is_floating_point or dt == torch.bool:
        return v
    info = torch.iinfo(dt)
    span = info.max - info.min + 1
    return TVal.const((v.scalar - info.min) % span + info.min)


def _bin(op: str):
    def lower(ctx, node, a, b, *rest, **kw):
        alpha = _operand(kw.get("alpha", rest[0] if rest else 1))
        val = node.meta["val"]
        a, b = _wrap_scalar(node, a), _wrap_scalar(node, b)
        if op in _ROUNDS_SCALAR:
            a, b = _round_scalar(node, a), _round_scalar(node, b)
        if alpha != 1:
            b = binary(ctx, "multiply", b, TVal.const(alpha), tile_dtype(val), val.dtype)
        return binary(ctx, op, a, b, tile_dtype(val), val.dtype)
    return lower


for _ops, _name in [((aten.add,), "add"), ((aten.sub,), "subtract"), ((aten.mul,), "multiply"),
                    ((aten.maximum,), "maximum"), ((aten.minimum,), "minimum"),
                    ((aten.eq,), "equal"), ((aten.ne,), "not_equal"), ((aten.gt,), "greater"),
                    ((aten.ge,), "greater_equal"), ((aten.lt,), "less"), ((aten.le,), "less_equal"),
                    ((aten.logical_and,), "logical_and"), ((aten.logical_or,), "logical_or"),
                    ((aten.logical_xor,), "logical_xor")]:
    register_lowering(*_ops, kind="pointwise")(_bin(_name))


@register_lowering(aten.div.Tensor, aten.div.Scalar, kind="pointwise")
def _div(ctx, node, a, b):
    """a / b = a * (1 / b): ``divide`` is no ALU operator; the reciprocal is the VectorE unary
    ALU op (more precise than ScalarE's, and defined on every input)."""
    dt = tile_dtype(node.meta["val"])
    if b.kind == "scalar":
        if a.kind == "scalar":
            return TVal.const(a.scalar / b.scalar)
        if a.kind == "full" and a.region.dtype in FLOAT_DTYPES:  # (ScalarE may take it: binary)
            return binary(ctx, "multiply", a, TVal.const(_reciprocal_const(b.scalar)), dt)
        return scalar_op(ctx, a, "multiply", _reciprocal_const(b.scalar), dt)
    rb = ctx.new(b.kind, "float32")
    ctx.kb.tensor_scalar(rb, data=b.region, operand0=0.0, op0=AluOp.reciprocal)
    return binary(ctx, "multiply", a, TVal(b.kind, rb), dt)


def _reciprocal_const(x) -> float:
    x = float(x)
    if x == 0.0:
        return math.copysign(math.inf, x)
    return 1.0 / x


@register_lowering(aten.reciprocal.default, kind="pointwise")
def _recip(ctx, node, a):
    """1 / a on VectorE: more precise than ScalarE's reciprocal, whose valid input range is
    +-[2**-42, 2**42] (nki.api.shared ``tbl-act-func``)."""
    if a.kind == "scalar":
        return TVal.const(_reciprocal_const(a.scalar))
    dst = ctx.new(a.kind, tile_dtype(node.meta["val"]))
    ctx.kb.tensor_scalar(dst, data=a.region, operand0=0.0, op0=AluOp.reciprocal)
    return TVal(a.kind, dst)


@register_lowering(aten.bitwise_and.Tensor, aten.bitwise_or.Tensor, aten.bitwise_xor.Tensor,
                    aten.bitwise_and.Scalar, aten.bitwise_or.Scalar, aten.bitwise_xor.Scalar, kind="pointwise")
def _bitwise(ctx, node, a, b):
    name = node.target._overloadpacket.__name__.split("_")[1]
    if node.meta["val"].dtype == torch.bool:
        return binary(ctx, "logical_" + name, a, b, "uint8")
    return binary(ctx, "bitwise_" + name, a, b, tile_dtype(node.meta["val"]), node.meta["val"].dtype)


@register_lowering(aten.logical_not.default, aten.bitwise_not.default, kind="pointwise")
def _not(ctx, node, a):
    if node.meta["val"].dtype != torch.bool and node.target is aten.bitwise_not.default:
        raise NotImplementedError("integer bitwise_not")
    if a.kind != "scalar" and a.hi is not None:
        nz = integers.nonzero(ctx, a)
        return scalar_op(ctx, nz, "equal", 0, "uint8")
    r = scalar_op(ctx, a, "equal", 0, "uint8")
    r = replace(r, bound=1 if r.kind != "scalar" else None)
    return r


_ACT = {
    aten.exp: ("exp", math.exp), aten.tanh: ("tanh", math.tanh),
    aten.sigmoid: ("sigmoid", lambda x: 1 / (1 + math.exp(-x))), aten.relu: ("relu", lambda x: max(x, 0)),
    aten.erf: ("erf", math.erf),
    aten.sign: ("sign", lambda x: (x > 0) - (x < 0)),
}


def _act(func: str, py):
    def lower(ctx, node, a):
        return unary(ctx, func, a, tile_dtype(node.meta["val"]), py=py)
    return lower


for _op, (_f, _py) in _ACT.items():
    register_lowering(_op.default, kind="pointwise")(_act(_f, _py))


@register_lowering(aten.neg.default, kind="pointwise")
def _neg(ctx, node, a):
    val = node.meta["val"]
    if not val.dtype.is_floating_point and a.kind != "scalar":
        return integers.negate(ctx, a, val.dtype)
    if a.kind == "full":  # a multiply by -1: ScalarE takes it when VectorE carries more of the chain
        return binary(ctx, "multiply", a, TVal.const(-1.0), tile_dtype(val))
    return scalar_op(ctx, a, "multiply", -1, tile_dtype(val))


@register_lowering(aten.abs.default, kind="pointwise")
def _abs(ctx, node, a):
    val = node.meta["val"]
    if a.kind == "scalar":
        return TVal.const(abs(a.scalar))
    if not val.dtype.is_floating_point and val.dtype != torch.bool:
        return integers.absolute(ctx, a, val.dtype)
    return unary(ctx, "abs", a, tile_dtype(val))


@register_lowering(aten.sin.default, aten.cos.default, kind="pointwise")
def _sin_cos(ctx, node, a):
    shift = 0.0 if node.target is aten.sin.default else math.pi / 2
    return act_range.sin(ctx, a, shift, tile_dtype(node.meta["val"]))


@register_lowering(aten.gelu.default, kind="pointwise")
def _gelu(ctx, node, a, approximate: str = "none"):
    func = "gelu_apprx_tanh" if approximate == "tanh" else "gelu"
    return unary(ctx, func, a, tile_dtype(node.meta["val"]))


@register_lowering(aten.log.default, kind="pointwise")
def _log(ctx, node, a):
    return act_range.log(ctx, a, tile_dtype(node.meta["val"]))


@register_lowering(aten.sqrt.default, kind="pointwise")
def _sqrt(ctx, node, a):
    return act_range.sqrt(ctx, a, tile_dtype(node.meta["val"]))


@register_lowering(aten.rsqrt.default, kind="pointwise")
def _rsqrt(ctx, node, a):
    return act_range.rsqrt(ctx, a, tile_dtype(node.meta["val"]))


@register_lowering(aten.log1p.default, kind="pointwise")
def _log1p(ctx, node, a):
    dt = tile_dtype(node.meta["val"])
    return act_range.log(ctx, scalar_op(ctx, a, "add", 1.0, "float32"), dt)


@register_lowering(aten.expm1.default, kind="pointwise")
def _expm1(ctx, node, a):
    dt = tile_dtype(node.meta["val"])
    return scalar_op(ctx, unary(ctx, "exp", a, dt, py=math.exp), "subtract", 1.0, dt)


@register_lowering(aten.pow.Tensor_Scalar, kind="pointwise")
def _pow(ctx, node, a, e):
    val = node.meta["val"]
    dt = tile_dtype(val)
    e = e.scalar if isinstance(e, TVal) else e
    if e == 1:
        return a
    if e == 2:
        return binary(ctx, "multiply", a, a, dt, val.dtype)
    if e == 3:
        return binary(ctx, "multiply", binary(ctx, "multiply", a, a, dt, val.dtype), a, dt, val.dtype)
    if not val.dtype.is_floating_point:
        if not isinstance(e, int) or not 0 <= e <= 64:
            raise NotImplementedError(f"integer pow with exponent {e}")
        return _int_pow(ctx, a, e, dt, val.dtype)
    if e == 0.5:
        return act_range.sqrt(ctx, a, dt)
    if e == -0.5:
        return act_range.rsqrt(ctx, a, dt)
    if e == -1:
        return _recip(ctx, node, a)
    if e == 0:
        return TVal.const(1.0 if dt.startswith("float") else 1)
    return binary(ctx, "power", a, TVal.const(e), dt)


def _int_pow(ctx, a, e: int, dt: str, out: torch.dtype) -> TVal:
    """``a ** e`` by square-and-multiply on the exact wrapping integer multiply: torch's integer
    pow wraps like repeated multiplication (fp32 power would saturate and round)."""
    acc, sq = None, a
    while True:
        if e & 1:
            acc = sq if acc is None else binary(ctx, "multiply", acc, sq, dt, out)
        e >>= 1
        if not e:
            return acc if acc is not None else TVal.const(1)
        sq = binary(ctx, "multiply", sq, sq, dt, out)


@register_lowering(aten.pow.Tensor_Tensor, kind="pointwise")
def _pow_tt(ctx, node, a, b):
    if not node.meta["val"].dtype.is_floating_point:
        # fp32 power saturates where torch wraps, and a per-element exponent cannot be unrolled
        # into exact wrapping multiplies
        raise NotImplementedError("integer pow with a tensor exponent")
    return binary(ctx, "power", a, b, tile_dtype(node.meta["val"]))


@register_lowering(aten.pow.Scalar, kind="pointwise")
def _pow_scalar_base(ctx, node, base, e):
    """base ** e = exp(e * ln(base)) in one ScalarE instruction (the rotary-frequency pattern)."""
    base = base.scalar if isinstance(base, TVal) else base
    if not node.meta["val"].dtype.is_floating_point:
        raise NotImplementedError("integer pow with a tensor exponent")  # exp(e ln b) is not exact
    if base <= 0:
        raise NotImplementedError("pow with a non-positive scalar base")
    return unary(ctx, "exp", e, tile_dtype(node.meta["val"]), scale=math.log(base),
                 py=lambda x: base ** x)


def _eager_int_clamp_bounds(dtype: torch.dtype, lo, hi) -> tuple[int | None, int | None]:
    """The bounds the running torch's eager ``clamp`` applies to an integer tensor, asked of torch
    itself: clamping the dtype's extremes gives the effective (min, max), since eager's clamp is
    ``min(max(x, lo'), hi')`` for in-range lo', hi'. torch <= 2.14 wraps an out-of-range bound
    (``uint8.clamp(-5, 100)`` is all 100s) and refuses others; torch 2.15 compares exactly (a bound
    past the range on the no-op side is ignored, past the other side refused). A refused bound is
    a declared fallback, so the call raises eager's own error; a no-op bound is dropped."""
    info = torch.iinfo(dtype)
    try:
        lo_e, hi_e = torch.tensor([info.min, info.max], dtype=dtype).clamp(lo, hi).tolist()
    except RuntimeError as e:
        raise NotImplementedError(f"clamp({lo}, {hi}) of {dtype}: eager refuses the bounds ({e})") from None
    return (None if lo is None or lo_e == info.min else lo_e), (None if hi is None or hi_e == info.max else hi_e)


@register_lowering(aten.clamp.default, kind="pointwise")
def _clamp(ctx, node, a, lo=None, hi=None):
    val = node.meta["val"]
    dt = tile_dtype(val)
    if not val.dtype.is_floating_point:  # exact integer max / min with the bounds eager applies
        lo, hi = (None if v is None else _operand(v) for v in (lo, hi))
        if val.dtype != torch.bool and all(v is None or type(v) is int for v in (lo, hi)):
            lo, hi = _eager_int_clamp_bounds(val.dtype, lo, hi)
            if lo is None and hi is None:
                return a
            return _clamp_t(ctx, node, a, None if lo is None else TVal.const(lo),
                            None if hi is None else TVal.const(hi))
        return _clamp_t(ctx, node, a, None if lo is None else _wrap_scalar(node, TVal.const(lo)),
                        None if hi is None else _wrap_scalar(node, TVal.const(hi)))
    if lo is not None and hi is not None:
        return scalar_op(ctx, a, "maximum", lo, dt, "minimum", hi)
    if lo is not None:
        return scalar_op(ctx, a, "maximum", lo, dt)
    if hi is not None:
        return scalar_op(ctx, a, "minimum", hi, dt)
    return a


@register_lowering(aten.clamp.Tensor, kind="pointwise")
def _clamp_t(ctx, node, a, lo=None, hi=None):
    val = node.meta["val"]
    dt = tile_dtype(val)
    if lo is not None:
        a = binary(ctx, "maximum", a, lo, dt, val.dtype)
    if hi is not None:
        a = binary(ctx, "minimum", a, hi, dt, val.dtype)
    if lo is not None and hi is not None and a.kind != "scalar":
        a = replace(a, bound=integers.bound(lo) if integers.bound(hi) is None or integers.bound(lo) is None
                    else max(integers.bound(lo), integers.bound(hi)))
    return a


@register_lowering(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar, kind="pointwise")
def _where(ctx, node, cond, a, b):
    dt = tile_dtype(node.meta["val"])
    if cond.kind == "scalar":
        return a if cond.scalar else b
    kind = "full" if "full" in (cond.kind, a.kind, b.kind) else "row"
    # the predicate must be an unsigned integer tile (tensor_copy_predicated's dtype rule); a bool
    # computed by a reduction (``any``) is carried in float32
    pred = cond if cond.kind == kind and cond.dtype in PREDICATE_DTYPES else copy(ctx, cond, "uint8", kind)
    if a.hi is not None or b.hi is not None:  # int64 words: select both
        return integers.select(ctx, pred.region, a, b, kind)
    out = copy(ctx, b, dt, kind)
    src = a if a.kind == kind and a.dtype == dt else copy(ctx, a, dt, kind)
    ctx.kb.tensor_copy_predicated(out.region, src=src.region, predicate=pred.region)
    ba, bb = integers.bound(a), integers.bound(b)
    out = replace(out, bound=None if None in (ba, bb) or dt != "int32" else max(ba, bb))
    return out


@register_lowering(aten._to_copy.default, aten.clone.default,
                    aten.lift_fresh_copy.default, torch.ops.prims.convert_element_type.default, kind="pointwise")
def _cast(ctx, node, a, dtype=None, **kw):
    val = node.meta["val"]
    if isinstance(dtype, torch.dtype):
        kw["dtype"] = dtype
    target = kw.get("dtype")
    if target is None or target == node.args[0].meta["val"].dtype:
        return a
    from .layout import HW_DTYPE
    hw = HW_DTYPE[val.dtype]
    tdt = hw if hw in ("bfloat16", "float16") else tile_dtype(val)
    if a.kind == "scalar":
        return TVal.const(float(a.scalar) if val.dtype.is_floating_point else int(a.scalar))
    if val.dtype == torch.bool:
        if a.hi is not None:
            return integers.nonzero(ctx, a)
        r = scalar_op(ctx, a, "not_equal", 0, "uint8")
        r = replace(r, bound=1)
        return r
    if val.dtype.is_floating_point:
        if a.hi is not None:
            f = TVal(a.kind, integers.to_float(ctx, a))
            return f if tdt == "float32" else copy(ctx, f, tdt)
        narrow = HW_DTYPE.get(node.args[0].meta["val"].dtype)
        if narrow in ("bfloat16", "float16") and a.dtype == "float32" and tdt == "float32":
            # a bf16/fp16 op computed in fp32 (tanh of a bf16 tile): round it as eager (and the HBM
            # copy of the same value) did, so an fp32 consumer sees the stored number
            a = copy(ctx, a, narrow)
        r = copy(ctx, a, tdt)
        r = replace(r, bound=None)
        return r
    if node.args[0].meta["val"].dtype.is_floating_point:  # eager's conversion for every input
        r = float_to_int.to_int64(ctx, a) if val.dtype == torch.int64 else float_to_int.to_int32(ctx, a)
        return integers.wrap(ctx, r, val.dtype)
    r = copy(ctx, a, tdt)
    if val.dtype != torch.int64 and r.hi is not None:  # int64 -> narrower: the low word, wrapped
        r = replace(r, hi=None, bound=None)
    return integers.wrap(ctx, r, val.dtype)


# --- sources: values with no tensor inputs ----------------------------------------------------

@register_lowering(aten.full.default, aten.scalar_tensor.default, kind="pointwise")
def _full(ctx, node, *args, **kw):
    value = args[1] if node.target is aten.full.default else args[0]
    return TVal.const(value.scalar if isinstance(value, TVal) else value)


@register_lowering(aten.empty_permuted.default, aten.empty.memory_format, kind="pointwise")
def _empty(ctx, node, *args, **kw):
    """Uninitialised memory: any value is correct; zero is the cheapest to make."""
    return TVal.const(0.0 if node.meta["val"].dtype.is_floating_point else 0)


@register_lowering(aten.full_like.default, kind="pointwise")
def _full_like(ctx, node, a, value, **kw):
    return TVal.const(value.scalar if isinstance(value, TVal) else value)


@register_lowering(aten.arange.start_step, aten.arange.default, aten.arange.start, kind="pointwise")
def _arange(ctx, node, *args, **kw):
    args = [a.scalar if isinstance(a, TVal) else a for a in args]
    if node.target is aten.arange.default:
        start, step = 0, 1
    elif node.target is aten.arange.start:
        start, step = args[0], 1
    else:
        start, step = args[0], args[2] if len(args) > 2 else kw.get("step", 1)
    return ctx.iota(node, start, step, tile_dtype(node.meta["val"]))


# --- reductions: (ALU op, identity, mean scaling) ----------------------------------------------

for _op, _spec in [(aten.sum.dim_IntList, ("add", 0.0)), (aten.sum.default, ("add", 0.0)),
                   (aten.mean.dim, ("add", 0.0)), (aten.mean.default, ("add", 0.0)),
                   (aten.amax.default, ("maximum", -math.inf)), (aten.amin.default, ("minimum", math.inf)),
                   (aten.prod.dim_int, ("multiply", 1.0)), (aten.prod.default, ("multiply", 1.0)),
                   (aten.any.dim, ("maximum", 0)), (aten.any.dims, ("maximum", 0)),
                   (aten.any.default, ("maximum", 0)), (aten.all.dim, ("minimum", 1)),
                   (aten.all.default, ("minimum", 1))]:
    register_lowering(_op, kind="reduction")(_spec)


@register_lowering(aten.copy_.default, kind="pointwise")
def _copy_into(ctx, node, dst, src, non_blocking=False):
    """``copy_(dst, src)``: the group stores ``src`` into the graph input ``dst`` (an input mutation)."""
    return src
