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

import torch

from .builder import TVal
from .registry import REDUCTIONS, register_pointwise

aten = torch.ops.aten

_PY = {"add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
       "divide": operator.truediv, "maximum": max, "minimum": min,
       "equal": operator.eq, "not_equal": operator.ne, "greater": operator.gt,
       "greater_equal": operator.ge, "less": operator.lt, "less_equal": operator.le,
       "logical_and": lambda a, b: bool(a) and bool(b), "logical_or": lambda a, b: bool(a) or bool(b),
       "logical_xor": lambda a, b: bool(a) != bool(b), "power": operator.pow}
_INT_GPSIMD = {"add", "subtract", "multiply"}


def tile_dtype(val) -> str:
    """The on-chip dtype a node's value is computed in."""
    dt = val.dtype
    if dt.is_floating_point:
        return "float32"
    if dt == torch.bool:
        return "uint8"
    return "int32"


def binary(ctx, op: str, a: TVal, b: TVal, dtype: str) -> TVal:
    if a.kind == "scalar" and b.kind == "scalar":
        return TVal.const(_PY[op](a.scalar, b.scalar))
    kind = "full" if "full" in (a.kind, b.kind) else "row"
    dst = ctx.new(kind, dtype)
    engine = "gpsimd" if (op in _INT_GPSIMD and not dtype.startswith("float")) or op == "power" \
        else "vector"
    if a.kind == b.kind:
        ctx.kb.instr(engine, "tensor_tensor", dst, {"data1": a.region, "data2": b.region}, op=op)
    elif a.kind == kind:   # tile op (row|scalar)
        other = b.region if b.kind == "row" else b.scalar
        ctx.kb.instr(engine, "tensor_scalar", dst, {"data": a.region, "operand0": other}, op0=op)
    else:                  # (row|scalar) op tile
        other = a.region if a.kind == "row" else a.scalar
        ctx.kb.instr(engine, "tensor_scalar", dst, {"data": b.region, "operand0": other}, op0=op,
                     reverse0=True)
    return TVal(kind, dst)


def unary(ctx, func: str, a: TVal, dtype: str, scale: float = 1.0, py=None) -> TVal:
    if a.kind == "scalar":
        if py is None:
            raise NotImplementedError(func)
        return TVal.const(py(a.scalar))
    dst = ctx.new(a.kind, dtype)
    ctx.kb.instr("scalar", "activation", dst, {"data": a.region}, op=func, scale=scale)
    return TVal(a.kind, dst)


def _operand(v):
    """A scalar argument as the instruction operand: lowerings receive Python scalars as ``TVal``s."""
    if isinstance(v, TVal):
        return v.scalar if v.kind == "scalar" else v.region
    return v


def scalar_op(ctx, a: TVal, op0: str, v0, dtype: str, op1: str | None = None, v1=None) -> TVal:
    v0, v1 = _operand(v0), _operand(v1)
    if a.kind == "scalar":
        r = _PY[op0](a.scalar, v0)
        return TVal.const(_PY[op1](r, v1) if op1 else r)
    dst = ctx.new(a.kind, dtype)
    attrs = {"op0": op0}
    srcs = {"data": a.region, "operand0": v0}
    if op1:
        attrs["op1"] = op1
        srcs["operand1"] = v1
    ctx.kb.instr("vector", "tensor_scalar", dst, srcs, **attrs)
    return TVal(a.kind, dst)


def copy(ctx, a: TVal, dtype: str, kind: str | None = None) -> TVal:
    """Copy (and cast) ``a``; with ``kind='full'`` a row or scalar is broadcast along the free axis."""
    kind = kind or a.kind
    dst = ctx.new(kind, dtype)
    if a.kind == "scalar":
        ctx.kb.instr("vector", "memset", dst, {}, value=a.scalar)
    elif a.kind == kind:
        ctx.kb.instr("vector", "tensor_copy", dst, {"src": a.region})
    else:  # row -> full
        ctx.kb.instr("vector", "memset", dst, {}, value=0)
        ctx.kb.instr("vector", "tensor_scalar", dst, {"data": dst, "operand0": a.region}, op0="add")
    return TVal(kind, dst)


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


def _bin(op: str):
    def lower(ctx, node, a, b, *rest, **kw):
        alpha = _operand(kw.get("alpha", rest[0] if rest else 1))
        if op in _ROUNDS_SCALAR:
            a, b = _round_scalar(node, a), _round_scalar(node, b)
        if alpha != 1:
            b = scalar_op(ctx, b, "multiply", alpha, tile_dtype(node.meta["val"]))
        return binary(ctx, op, a, b, tile_dtype(node.meta["val"]))
    return lower


for _ops, _name in [((aten.add,), "add"), ((aten.sub,), "subtract"), ((aten.mul,), "multiply"),
                    ((aten.maximum,), "maximum"), ((aten.minimum,), "minimum"),
                    ((aten.eq,), "equal"), ((aten.ne,), "not_equal"), ((aten.gt,), "greater"),
                    ((aten.ge,), "greater_equal"), ((aten.lt,), "less"), ((aten.le,), "less_equal"),
                    ((aten.logical_and,), "logical_and"), ((aten.logical_or,), "logical_or"),
                    ((aten.logical_xor,), "logical_xor")]:
    register_pointwise(*_ops)(_bin(_name))


@register_pointwise(aten.div.Tensor, aten.div.Scalar)
def _div(ctx, node, a, b):
    dt = tile_dtype(node.meta["val"])
    if b.kind == "scalar":
        return scalar_op(ctx, a, "divide", b.scalar, dt)
    return binary(ctx, "divide", a, b, dt)


@register_pointwise(aten.bitwise_and.Tensor, aten.bitwise_or.Tensor, aten.bitwise_xor.Tensor,
                    aten.bitwise_and.Scalar, aten.bitwise_or.Scalar, aten.bitwise_xor.Scalar)
def _bitwise(ctx, node, a, b):
    name = node.target._overloadpacket.__name__.split("_")[1]
    if node.meta["val"].dtype == torch.bool:
        return binary(ctx, "logical_" + name, a, b, "uint8")
    return binary(ctx, "bitwise_" + name, a, b, tile_dtype(node.meta["val"]))


@register_pointwise(aten.logical_not.default, aten.bitwise_not.default)
def _not(ctx, node, a):
    if node.meta["val"].dtype != torch.bool and node.target is aten.bitwise_not.default:
        raise NotImplementedError("integer bitwise_not")
    return scalar_op(ctx, a, "equal", 0, "uint8")


_ACT = {
    aten.exp: ("exp", math.exp), aten.log: ("log", math.log), aten.sqrt: ("sqrt", math.sqrt),
    aten.rsqrt: ("rsqrt", lambda x: 1 / math.sqrt(x)), aten.tanh: ("tanh", math.tanh),
    aten.sigmoid: ("sigmoid", lambda x: 1 / (1 + math.exp(-x))), aten.relu: ("relu", lambda x: max(x, 0)),
    aten.sin: ("sin", math.sin), aten.cos: ("cos", math.cos), aten.erf: ("erf", math.erf),
    aten.abs: ("abs", abs), aten.reciprocal: ("reciprocal", lambda x: 1 / x),
    aten.sign: ("sign", lambda x: (x > 0) - (x < 0)),
}


def _act(func: str, py):
    def lower(ctx, node, a):
        return unary(ctx, func, a, tile_dtype(node.meta["val"]), py=py)
    return lower


for _op, (_f, _py) in _ACT.items():
    register_pointwise(_op.default)(_act(_f, _py))


@register_pointwise(aten.neg.default)
def _neg(ctx, node, a):
    return scalar_op(ctx, a, "multiply", -1, tile_dtype(node.meta["val"]))


@register_pointwise(aten.gelu.default)
def _gelu(ctx, node, a, approximate: str = "none"):
    func = "gelu_apprx_tanh" if approximate == "tanh" else "gelu"
    return unary(ctx, func, a, tile_dtype(node.meta["val"]))


@register_pointwise(aten.log1p.default)
def _log1p(ctx, node, a):
    dt = tile_dtype(node.meta["val"])
    return unary(ctx, "log", scalar_op(ctx, a, "add", 1.0, dt), dt, py=math.log)


@register_pointwise(aten.expm1.default)
def _expm1(ctx, node, a):
    dt = tile_dtype(node.meta["val"])
    return scalar_op(ctx, unary(ctx, "exp", a, dt, py=math.exp), "subtract", 1.0, dt)


@register_pointwise(aten.pow.Tensor_Scalar)
def _pow(ctx, node, a, e):
    dt = tile_dtype(node.meta["val"])
    e = e.scalar if isinstance(e, TVal) else e
    if e == 1:
        return a
    if e == 2:
        return binary(ctx, "multiply", a, a, dt)
    if e == 3:
        return binary(ctx, "multiply", binary(ctx, "multiply", a, a, dt), a, dt)
    if e == 0.5:
        return unary(ctx, "sqrt", a, dt, py=math.sqrt)
    if e == -0.5:
        return unary(ctx, "rsqrt", a, dt, py=lambda x: x ** -0.5)
    if e == -1:
        return unary(ctx, "reciprocal", a, dt, py=lambda x: 1 / x)
    if e == 0:
        return TVal.const(1.0 if dt.startswith("float") else 1)
    return scalar_op(ctx, a, "power", e, dt)


@register_pointwise(aten.pow.Tensor_Tensor)
def _pow_tt(ctx, node, a, b):
    return binary(ctx, "power", a, b, tile_dtype(node.meta["val"]))


@register_pointwise(aten.pow.Scalar)
def _pow_scalar_base(ctx, node, base, e):
    """base ** e = exp(e * ln(base)) in one ScalarE instruction (the rotary-frequency pattern)."""
    base = base.scalar if isinstance(base, TVal) else base
    if base <= 0:
        raise NotImplementedError("pow with a non-positive scalar base")
    return unary(ctx, "exp", e, tile_dtype(node.meta["val"]), scale=math.log(base),
                 py=lambda x: base ** x)


@register_pointwise(aten.clamp.default)
def _clamp(ctx, node, a, lo=None, hi=None):
    dt = tile_dtype(node.meta["val"])
    if lo is not None and hi is not None:
        return scalar_op(ctx, a, "maximum", lo, dt, "minimum", hi)
    if lo is not None:
        return scalar_op(ctx, a, "maximum", lo, dt)
    if hi is not None:
        return scalar_op(ctx, a, "minimum", hi, dt)
    return a


@register_pointwise(aten.clamp.Tensor)
def _clamp_t(ctx, node, a, lo=None, hi=None):
    dt = tile_dtype(node.meta["val"])
    if lo is not None:
        a = binary(ctx, "maximum", a, lo, dt)
    if hi is not None:
        a = binary(ctx, "minimum", a, hi, dt)
    return a


@register_pointwise(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(ctx, node, cond, a, b):
    dt = tile_dtype(node.meta["val"])
    if cond.kind == "scalar":
        return a if cond.scalar else b
    kind = "full" if "full" in (cond.kind, a.kind, b.kind) else "row"
    out = copy(ctx, b, dt, kind)
    src = a if a.kind == kind and a.dtype == dt else copy(ctx, a, dt, kind)
    pred = cond if cond.kind == kind else copy(ctx, cond, "uint8", kind)
    ctx.kb.instr("vector", "tensor_copy_predicated", out.region,
                 {"src": src.region, "predicate": pred.region})
    return out


@register_pointwise(aten._to_copy.default, aten.clone.default, aten.alias.default,
                    aten.lift_fresh_copy.default, torch.ops.prims.convert_element_type.default)
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
        return scalar_op(ctx, a, "not_equal", 0, "uint8")
    return copy(ctx, a, tdt)


# --- sources: values with no tensor inputs ----------------------------------------------------

@register_pointwise(aten.full.default, aten.scalar_tensor.default)
def _full(ctx, node, *args, **kw):
    value = args[1] if node.target is aten.full.default else args[0]
    return TVal.const(value.scalar if isinstance(value, TVal) else value)


@register_pointwise(aten.full_like.default)
def _full_like(ctx, node, a, value, **kw):
    return TVal.const(value.scalar if isinstance(value, TVal) else value)


@register_pointwise(aten.arange.start_step, aten.arange.default, aten.arange.start)
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
    REDUCTIONS[_op] = _spec


@register_pointwise(aten.copy_.default)
def _copy_into(ctx, node, dst, src, non_blocking=False):
    """``copy_(dst, src)``: the group stores ``src`` into the graph input ``dst`` (an input mutation)."""
    return src
