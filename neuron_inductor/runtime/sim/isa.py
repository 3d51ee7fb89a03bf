"""``nisa``: the engine instructions of the NKI subset, executed eagerly on numpy.

Every instruction is destination-first with keyword operands and returns None.  Before computing, it
checks what the hardware would refuse: operand memories per engine (TensorE reads SBUF and writes
PSUM, GpSimd never touches PSUM, DMA moves HBM<->SBUF only, compute never takes HBM operands),
partition counts, shapes (matmul K/M/N limits), reduction axes and dtypes.  Inputs are computed in
fp32 (bitwise ops exactly on integers) and cast on write to the destination dtype.  Each executed
instruction is counted per engine (and traced when a trace is recording).
"""
from __future__ import annotations

import functools
import math
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from . import dtypes as dt
from .errors import refuse
from .numerics import REDUCERS, UNARY_ALU, Op, as_op
from .state import KernelContext, require_kernel
from .tensor import AccessPattern, Tensor


class Engine:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"nisa.{self.name}_engine"


tensor_engine = Engine("tensor")
vector_engine = Engine("vector")
scalar_engine = Engine("scalar")
gpsimd_engine = Engine("gpsimd")
unknown_engine = Engine("unknown")
engine = SimpleNamespace(tensor=tensor_engine, vector=vector_engine, scalar=scalar_engine,
                         gpsimd=gpsimd_engine, unknown=unknown_engine)

_SCALARS = (int, float, bool, np.number)


def _instr(fn: Callable) -> Callable:
    """Run an instruction inside a kernel, quietly (inf/nan without numpy warnings)."""
    api = f"nisa.{fn.__name__}"

    @functools.wraps(fn)
    def run(*args: Any, **kw: Any) -> None:
        ctx = require_kernel(api)
        if args:
            raise refuse("operand", f"{api}: pass every operand by keyword (dst=, src=, ...); "
                         f"got {len(args)} positional argument(s)")
        with np.errstate(all="ignore"):
            fn(ctx, **kw)

    return run


def _engine(e: Any, default: str, allowed: tuple[str, ...], api: str) -> str:
    name = default if e is None or e is unknown_engine else getattr(e, "name", None)
    if name not in allowed:
        raise refuse("engine", f"{api} cannot run on engine {e!r} (allowed: {list(allowed)})")
    return name


def _tile(x: Any, role: str, api: str, allow: tuple[str, ...] = ("sbuf", "psum"),
          engine_name: str = "") -> Tensor:
    """Check an on-chip operand: a live tile region in an allowed memory."""
    if isinstance(x, AccessPattern) or (isinstance(x, Tensor) and x.memory == "hbm"):
        raise refuse("engine-memory", f"{api}: {role} is in HBM; compute instructions take SBUF/"
                     "PSUM operands only (move data with nisa.dma_copy)", x)
    if not isinstance(x, Tensor):
        raise refuse("operand", f"{api}: {role} must be a tile region, got {type(x).__name__}")
    if x.memory not in allow:
        who = f"{engine_name} engine" if engine_name else api
        raise refuse("engine-memory", f"{api}: {role} is in {x.memory.upper()}, which the {who} "
                     f"cannot access here (allowed: {', '.join(m.upper() for m in allow)})", x)
    if x.ndim < 2:
        raise refuse("tile-rank", f"{api}: {role} must be at least 2-D", x)
    x.array  # scope check
    return x


def _same_partitions(api: str, *ts: Tensor) -> None:
    p = ts[0].partitions
    for t in ts[1:]:
        if t.partitions != p:
            raise refuse("partition-mismatch", f"{api}: operands span {p} and {t.partitions} "
                         "partitions", ts[0], t)


def _same_free(api: str, a: Tensor, b: Tensor) -> None:
    if a.free_size != b.free_size:
        raise refuse("shape", f"{api}: {list(a.shape)} and {list(b.shape)} differ in elements per "
                     "partition", a, b)


def _column(x: Any, role: str, api: str, p: int) -> Tensor:
    """A ``[P, 1]`` per-partition operand."""
    t = _tile(x, role, api)
    if t.free_size != 1 or t.partitions != p:
        raise refuse("partition-mismatch" if t.free_size == 1 else "shape",
                     f"{api}: {role} must be a [{p}, 1] region, got {list(t.shape)}", t)
    return t


def _as_op(op: Any, api: str, kinds: tuple[str, ...]) -> Op:
    o = as_op(op)
    if o is None or o.kind not in kinds:
        raise refuse("unsupported-op", f"{api}: {op!r} is not a supported operator here "
                     f"(kinds allowed: {list(kinds)})")
    return o


def _rows(t: Tensor) -> np.ndarray:
    return t.array.reshape(t.partitions, t.free_size)


def _write(dst: Tensor, values: np.ndarray) -> None:
    dst.array[...] = dt.cast_to(values, dst.dtype).reshape(dst.shape)


def _apply(op: Op, a: np.ndarray, b: Any, a_int: bool, b_int: bool, api: str,
           *ts: Any) -> np.ndarray:
    if op.kind == "bitvec":
        if not (a_int and b_int):
            raise refuse("dtype", f"{api}: {op!r} needs integer operands", *ts)
        return op.fn(np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64))
    return op.fn(dt.to_f32(np.asarray(a)), dt.to_f32(np.asarray(b)))


# --- DMA ---------------------------------------------------------------------------------------

@_instr
def dma_copy(ctx: KernelContext, *, dst: Any, src: Any, dst_rmw_op: Any = None,
             oob_mode: Any = None, dge_mode: Any = None, priority: Any = None) -> None:
    """HBM <-> SBUF transfer; a dtype difference is a cast through fp32."""
    api = "nisa.dma_copy"
    for role, x in (("dst", dst), ("src", src)):
        if not isinstance(x, (Tensor, AccessPattern)):
            raise refuse("operand", f"{api}: {role} must be a tile region or an HBM access "
                         f"pattern, got {type(x).__name__}")
        if x.memory == "psum":
            raise refuse("engine-memory", f"{api}: {role} is in PSUM; DMA cannot access PSUM "
                         "(copy to SBUF with tensor_copy first)", x)
    if {dst.memory, src.memory} != {"hbm", "sbuf"}:
        raise refuse("engine-memory", f"{api}: moves HBM<->SBUF only, got {src.memory.upper()}->"
                     f"{dst.memory.upper()}", dst, src)
    if dst_rmw_op is not None:
        raise refuse("unsupported", f"{api}: dst_rmw_op is not supported", dst)
    if tuple(dst.shape) != tuple(src.shape):
        raise refuse("dma-shape", f"{api}: dst shape {list(dst.shape)} != src shape "
                     f"{list(src.shape)}", dst, src)
    values = src.read() if isinstance(src, AccessPattern) else src.array
    if dst.dtype != src.dtype:
        values = dt.cast_to(dt.to_f32(values), dst.dtype)
    if isinstance(dst, AccessPattern):
        dst.write(values)
    else:
        dst.array[...] = values
        dst.mark_written()
    h = dst if dst.memory == "hbm" else src
    n = math.prod(h.shape)
    rows = max(1, h.shape[0]) if h.shape else 1
    ctx.count("dma", "dma_copy", rows, n // rows, operands=(dst, src),
              nbytes=n * h.itemsize, store=dst.memory == "hbm")


# --- TensorE -----------------------------------------------------------------------------------

@_instr
def nc_matmul(ctx: KernelContext, *, dst: Any, stationary: Any, moving: Any,
              accumulate: bool | None = None, is_stationary_onezero: bool = False,
              is_moving_onezero: bool = False, is_transpose: bool = False) -> None:
    """dst[M, N] (=|+=) stationary[K, M].T @ moving[K, N], fp32 in PSUM."""
    api = "nisa.nc_matmul"
    d = _tile(dst, "dst", api, ("psum",), "tensor")
    s = _tile(stationary, "stationary", api, ("sbuf",), "tensor")
    m = _tile(moving, "moving", api, ("sbuf",), "tensor")
    lim = ctx.limits
    k, mm = s.partitions, s.free_size
    k2, n = m.partitions, m.free_size
    if k != k2:
        raise refuse("matmul-shape", f"{api}: contraction mismatch: stationary K={k}, moving "
                     f"K={k2}", s, m)
    if k > lim.matmul_k_max or mm > lim.matmul_m_max or n > lim.matmul_n_max:
        raise refuse("matmul-shape", f"{api}: K={k}, M={mm}, N={n} exceed K<={lim.matmul_k_max}, "
                     f"M<={lim.matmul_m_max}, N<={lim.matmul_n_max}", s, m)
    if d.partitions != mm or d.free_size != n:
        raise refuse("matmul-shape", f"{api}: dst {list(d.shape)} must be [M={mm}, N={n}]", d)
    for t in (s, m):
        if not dt.is_float(t.dtype):
            raise refuse("dtype", f"{api}: operands must be float, got {t.dtype}", t)
    if (s.dtype == dt.float32) != (m.dtype == dt.float32):
        raise refuse("dtype", f"{api}: fp32 must pair with fp32 (stationary {s.alloc.dtype_name}, "
                     f"moving {m.alloc.dtype_name})", s, m)
    if d.dtype != dt.float32:
        raise refuse("dtype", f"{api}: the PSUM destination must be float32", d)
    # to_f32 copies only bf16/fp16 operands (astype always copied, twice per matmul)
    res = (dt.to_f32(_rows(s)).T @ dt.to_f32(_rows(m))).reshape(d.shape)
    out = d.array
    if accumulate is None:
        alloc = d.alloc
        if alloc.mm_written is None:
            alloc.mm_written = np.zeros(alloc.shape, dtype=bool)
        seen = alloc.mm_written[d._slices()]
        out[...] = np.where(seen, out + res, res)
        seen[...] = True
    elif accumulate:
        out += res
    else:
        out[...] = res
    ctx.count("tensor", "nc_matmul", k, n, operands=(d, s, m), dims=(k, mm, n))


@_instr
def nc_transpose(ctx: KernelContext, *, dst: Any, data: Any, engine: Any = None) -> None:
    """dst[F, P] = data[P, F]: TensorE (SBUF->PSUM, <=128x128) or VectorE (<=32x32)."""
    api = "nisa.nc_transpose"
    eng = _engine(engine, "tensor", ("tensor", "vector"), api)
    if eng == "tensor":
        d = _tile(dst, "dst", api, ("psum",), "tensor")
        x = _tile(data, "data", api, ("sbuf",), "tensor")
        limit = 128
    else:
        d, x, limit = _tile(dst, "dst", api), _tile(data, "data", api), 32
    p, f = x.partitions, x.free_size
    if p > limit or f > limit:
        raise refuse("transpose-shape", f"{api}: [{p}, {f}] exceeds {limit}x{limit} on the {eng} "
                     "engine", x)
    if d.partitions != f or d.free_size != p:
        raise refuse("transpose-shape", f"{api}: dst {list(d.shape)} must be [{f}, {p}]", d, x)
    _write(d, dt.to_f32(_rows(x)).T)
    ctx.count(eng, "nc_transpose", p, f, operands=(d, x), dims=(p, f))


# --- ScalarE -----------------------------------------------------------------------------------

@_instr
def activation(ctx: KernelContext, *, dst: Any, op: Any, data: Any, bias: Any = None,
               scale: Any = 1.0, reduce_op: Any = None, reduce_res: Any = None,
               reduce_cmd: Any = None) -> None:
    """dst = op(data * scale + bias); optionally reduce_res = row-reduce(result)."""
    api = "nisa.activation"
    f = _as_op(op, api, ("act",))
    d, x = _tile(dst, "dst", api), _tile(data, "data", api)
    _same_partitions(api, d, x)
    _same_free(api, d, x)
    p = x.partitions
    v = dt.to_f32(_rows(x))
    if isinstance(scale, Tensor):
        sc = _column(scale, "scale", api, p)
        if not dt.is_float(sc.dtype):
            raise refuse("activation-operand", f"{api}: scale tile must be float", sc)
        v = v * dt.to_f32(_rows(sc))
    elif isinstance(scale, _SCALARS):
        v = v * np.float32(scale)
    else:
        raise refuse("activation-operand", f"{api}: scale must be a number or a [P, 1] tile, "
                     f"got {type(scale).__name__}", scale if hasattr(scale, "alloc") else None)
    if bias is not None:
        b = _column(bias, "bias", api, p)
        if not dt.is_float(b.dtype):
            raise refuse("activation-operand", f"{api}: bias tile must be float", b)
        v = v + dt.to_f32(_rows(b))
    y = f.fn(v)
    _write(d, y)
    if reduce_op is not None or reduce_res is not None:
        r = _as_op(reduce_op, api, ("arith",))
        if r.name not in ("add", "maximum", "minimum") or reduce_res is None:
            raise refuse("activation-operand", f"{api}: reduce_op must be nl.add/maximum/minimum "
                         "together with a [P, 1] reduce_res")
        rr = _column(reduce_res, "reduce_res", api, p)
        _write(rr, REDUCERS[r.name](y, axis=1, keepdims=True))
    ctx.count("scalar", "activation", p, x.free_size, operands=(d, x))


# --- VectorE / GpSimd --------------------------------------------------------------------------

@_instr
def tensor_tensor(ctx: KernelContext, *, dst: Any, data1: Any, data2: Any, op: Any,
                  engine: Any = None) -> None:
    """dst = data1 op data2 (same partitions and elements per partition)."""
    api = "nisa.tensor_tensor"
    eng = _engine(engine, "vector", ("vector", "gpsimd"), api)
    allow = ("sbuf",) if eng == "gpsimd" else ("sbuf", "psum")
    o = _as_op(op, api, ("arith", "compare", "logical", "bitvec"))
    d = _tile(dst, "dst", api, allow, eng)
    a = _tile(data1, "data1", api, allow, eng)
    b = _tile(data2, "data2", api, allow, eng)
    if a.memory == "psum" and b.memory == "psum":
        raise refuse("engine-memory", f"{api}: data1 and data2 cannot both be in PSUM", a, b)
    _same_partitions(api, d, a, b)
    _same_free(api, a, b)
    _same_free(api, d, a)
    ints = a.dtype in dt.INTS, b.dtype in dt.INTS
    if eng == "gpsimd" and o.name in ("add", "subtract", "multiply") \
            and all(t.dtype in (dt.int32, dt.uint32) for t in (d, a, b)):
        # GpSimd on all-int32/uint32 tiles: native integer arithmetic, wrapping modulo 2**32
        fn = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply}[o.name]
        r = fn(_rows(a).astype(np.int64), _rows(b).astype(np.int64)) & 0xFFFFFFFF
        d.array[...] = r.astype(np.uint32).view(np.int32 if d.dtype == dt.int32 else np.uint32) \
            .reshape(d.shape)
    else:
        _write(d, _apply(o, _rows(a), _rows(b), ints[0], ints[1], api, a, b))
    ctx.count(eng, "tensor_tensor", a.partitions, a.free_size, operands=(d, a, b))


def _scalar_operand(x: Any, role: str, api: str, p: int) -> tuple[Any, bool]:
    if isinstance(x, Tensor):
        t = _column(x, role, api, p)
        return _rows(t), t.dtype in dt.INTS
    if isinstance(x, _SCALARS):
        is_int = isinstance(x, (int, np.integer)) and not isinstance(x, bool)
        return (np.int64(x) if is_int else np.float32(x)), is_int
    raise refuse("operand", f"{api}: {role} must be a number or a [P, 1] tile, got "
                 f"{type(x).__name__}")


@_instr
def tensor_scalar(ctx: KernelContext, *, dst: Any, data: Any, op0: Any, operand0: Any,
                  reverse0: bool = False, op1: Any = None, operand1: Any = None,
                  reverse1: bool = False, engine: Any = None) -> None:
    """dst = (data op0 operand0) op1 operand1, operands scalar or [P, 1] (broadcast on free)."""
    api = "nisa.tensor_scalar"
    eng = _engine(engine, "vector", ("vector", "scalar", "gpsimd"), api)
    allow = ("sbuf",) if eng == "gpsimd" else ("sbuf", "psum")
    d = _tile(dst, "dst", api, allow, eng)
    x = _tile(data, "data", api, allow, eng)
    _same_partitions(api, d, x)
    _same_free(api, d, x)
    kinds = ("arith", "compare", "logical", "bitvec")
    v, v_int = _rows(x), x.dtype in dt.INTS
    steps = [(op0, operand0, reverse0, "operand0")]
    if op1 is not None:
        steps.append((op1, operand1, reverse1, "operand1"))
    ops = [_as_op(o, api, kinds + ("act",)) for o, _, _, _ in steps]
    for o in ops:
        if o.kind == "act" and o.name not in UNARY_ALU:
            raise refuse("unsupported-op", f"{api}: {o!r} is not an ALU operator")
    if len(ops) == 2 and (ops[0].kind == "bitvec") != (ops[1].kind == "bitvec"):
        raise refuse("unsupported-op", f"{api}: op0 and op1 must both be bitwise or both "
                     "arithmetic", x)
    for o, (_, operand, rev, role) in zip(ops, steps):
        if o.kind == "act":  # unary ALU op: the operand is ignored
            v, v_int = o.fn(dt.to_f32(np.asarray(v))), False
            continue
        c, c_int = _scalar_operand(operand, role, api, x.partitions)
        v = _apply(o, c, v, c_int, v_int, api, x) if rev else _apply(o, v, c, v_int, c_int, api, x)
        v_int = o.kind == "bitvec"
    _write(d, v)
    ctx.count(eng, "tensor_scalar", x.partitions, x.free_size, operands=(d, x))


@_instr
def tensor_reduce(ctx: KernelContext, *, dst: Any, op: Any, data: Any, axis: Any,
                  negate: bool = False, keepdims: bool = False) -> None:
    """Reduce free axes (contiguous, ending at the last one); never the partition axis."""
    api = "nisa.tensor_reduce"
    o = _as_op(op, api, ("arith",))
    if o.name not in REDUCERS:
        raise refuse("unsupported-op", f"{api}: {o!r} is not a reduction operator")
    d, x = _tile(dst, "dst", api), _tile(data, "data", api)
    axes = tuple(sorted(int(a) for a in (axis if isinstance(axis, (tuple, list)) else (axis,))))
    if 0 in axes:
        raise refuse("reduce-partition-axis", f"{api}: axis {list(axes)} includes the partition "
                     "axis 0; reduce across partitions with a transpose or a matmul", x)
    if not axes or axes != tuple(range(axes[0], x.ndim)):
        raise refuse("reduce-axis", f"{api}: axis {list(axes)} must be contiguous free axes "
                     f"ending at the last axis {x.ndim - 1}", x)
    _same_partitions(api, d, x)
    res = REDUCERS[o.name](dt.to_f32(x.array), axis=axes, keepdims=True)
    if negate:
        res = -res
    if d.free_size != res.size // x.partitions:
        raise refuse("shape", f"{api}: dst {list(d.shape)} cannot hold the result "
                     f"{list(res.shape)}", d)
    _write(d, res)
    ctx.count("vector", "tensor_reduce", x.partitions, x.free_size, operands=(d, x))


@_instr
def tensor_copy(ctx: KernelContext, *, dst: Any, src: Any, engine: Any = None) -> None:
    """Copy with cast on write; Vector/GpSimd copies of equal dtypes are bit-exact."""
    api = "nisa.tensor_copy"
    eng = _engine(engine, "vector", ("vector", "scalar", "gpsimd"), api)
    allow = ("sbuf",) if eng == "gpsimd" else ("sbuf", "psum")
    d = _tile(dst, "dst", api, allow, eng)
    s = _tile(src, "src", api, allow, eng)
    _same_partitions(api, d, s)
    _same_free(api, d, s)
    if s.dtype == d.dtype and eng != "scalar":
        d.array[...] = s.array.reshape(d.shape)
    else:
        _write(d, dt.to_f32(s.array))
    ctx.count(eng, "tensor_copy", s.partitions, s.free_size, operands=(d, s))


@_instr
def tensor_copy_predicated(ctx: KernelContext, *, dst: Any, src: Any, predicate: Any,
                           reverse_pred: bool = False) -> None:
    """dst = src where predicate != 0 (== 0 with reverse_pred); elsewhere dst is kept."""
    api = "nisa.tensor_copy_predicated"
    d, s, p = _tile(dst, "dst", api), _tile(src, "src", api), _tile(predicate, "predicate", api)
    _same_partitions(api, d, s, p)
    _same_free(api, d, s)
    _same_free(api, d, p)
    mask = (p.array != 0).reshape(d.shape)
    if reverse_pred:
        mask = ~mask
    vals = s.array.reshape(d.shape)
    if s.dtype != d.dtype:
        vals = dt.cast_to(dt.to_f32(vals), d.dtype)
    np.copyto(d.array, vals, where=mask)
    ctx.count("vector", "tensor_copy_predicated", s.partitions, s.free_size,
              operands=(d, s, p))


@_instr
def memset(ctx: KernelContext, *, dst: Any, value: Any, engine: Any = None) -> None:
    """Fill a region with a constant (cast to the destination dtype)."""
    api = "nisa.memset"
    eng = _engine(engine, "vector", ("vector", "gpsimd"), api)
    allow = ("sbuf",) if eng == "gpsimd" else ("sbuf", "psum")
    d = _tile(dst, "dst", api, allow, eng)
    if not isinstance(value, _SCALARS):
        raise refuse("operand", f"{api}: value must be a number, got {type(value).__name__}", d)
    d.array[...] = dt.cast_to(np.array([value], dtype=np.float64 if isinstance(value, float)
                                       else None), d.dtype)[0]
    ctx.count(eng, "memset", d.partitions, d.free_size, operands=(d,))


@_instr
def iota(ctx: KernelContext, *, dst: Any, pattern: Any, offset: int = 0,
         channel_multiplier: int = 0) -> None:
    """dst[p, f...] = offset + channel_multiplier*p + sum(stride_i * f_i), int32 math (GpSimd)."""
    api = "nisa.iota"
    d = _tile(dst, "dst", api, ("sbuf",), "gpsimd")
    try:
        pat = [(int(s), int(c)) for s, c in pattern]
    except (TypeError, ValueError):
        raise refuse("operand", f"{api}: pattern must be [[stride, count], ...]", d) from None
    counts = [c for _, c in pat]
    if counts != list(d.shape[1:]) and int(np.prod(counts)) != d.free_size:
        raise refuse("shape", f"{api}: pattern counts {counts} do not match dst free shape "
                     f"{list(d.shape[1:])}", d)
    v = np.full((d.partitions,) + tuple(counts), int(offset), dtype=np.int64)
    nd = v.ndim
    v += (np.arange(d.partitions, dtype=np.int64) * int(channel_multiplier)).reshape(
        (-1,) + (1,) * (nd - 1))
    for axis, (s, c) in enumerate(pat, start=1):
        shape = [1] * nd
        shape[axis] = c
        v += (np.arange(c, dtype=np.int64) * s).reshape(shape)
    v32 = v.astype(np.int32)
    _write(d, v32.astype(d.dtype) if dt.is_float(d.dtype) else v32)
    ctx.count("gpsimd", "iota", d.partitions, d.free_size, operands=(d,))


def __getattr__(name: str) -> Any:
    raise AttributeError(f"nisa.{name} is not supported by the neuron_inductor NKI simulator "
                         "(see the NKI subset contract in neuron_inductor/runtime/sim)")
