"""``nisa``: the engine instructions of the NKI subset, executed eagerly on numpy.

Every instruction is destination-first with keyword operands and returns None.  Before computing it
asks the instruction specification (:mod:`neuron_inductor.spec`) whether the documented hardware
accepts the call on the target the kernel was compiled for (engine, operator, dtypes, memories,
shapes) and refuses every violation with the rule id and its citation.  While computing it checks the
value rules: activation inputs inside the function's valid range, integer comparisons exact in
float32, matmul accumulation only onto matmul-initialised PSUM, GpSimd integer results inside 32
bits.  Inputs are computed in fp32 (bitwise ops exactly on integers, written as bit patterns;
GpSimd integer arithmetic exactly) and cast on write to the destination dtype.  Each executed instruction is counted per engine (and traced).
"""
from __future__ import annotations

import functools
import math
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from neuron_inductor import spec

from . import dtypes as dt
from .errors import refuse
from .numerics import ALL_OPS, INT_NATIVE, REDUCERS, unary_alu
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
_SCALARS = (int, float, bool, np.number)
engine = SimpleNamespace(tensor=tensor_engine, vector=vector_engine, scalar=scalar_engine,
                         gpsimd=gpsimd_engine, unknown=unknown_engine)

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


def _engine_name(e: Any) -> str | None:
    """The engine a call names (None: unknown, the compiler picks)."""
    if e is None or e is unknown_engine:
        return None
    name = getattr(e, "name", None)
    if name not in spec.ENGINES:
        raise refuse("operand", f"engine={e!r} is not an nisa engine")
    return name


def _tile(x: Any, role: str, api: str) -> Tensor | AccessPattern:
    """An operand that is a tensor (its memory is judged by the specification)."""
    if not isinstance(x, (Tensor, AccessPattern)):
        raise refuse("operand", f"{api}: {role} must be a tile region, got {type(x).__name__}")
    if isinstance(x, Tensor) and x.memory != "hbm":
        if x.ndim < 2:
            raise refuse("tile-rank", f"{api}: {role} must be at least 2-D", x)
        x.array  # scope check
    return x


def _desc(x: Any) -> Any:
    """The specification's view of an operand: tensors by memory/dtype/sizes, literals as is."""
    if isinstance(x, (Tensor, AccessPattern)):
        return spec.Opnd(x.memory, dt.NAMES.get(x.dtype, str(x.dtype)), x.partitions, x.free_size)
    return x


def _conform(ctx: KernelContext, name: str, engine: str | None, ops: dict[str, Any],
             attrs: dict[str, Any] | None = None) -> str:
    """Refuse the call unless the specification accepts it; returns the engine it runs on."""
    described = {k: _desc(v) for k, v in ops.items()}
    attrs = attrs or {}
    findings = spec.check_instr(name, engine, ctx.target, described, attrs)
    if findings:
        f = findings[0]
        more = f" (+{len(findings) - 1} more: {', '.join(x.rule for x in findings[1:])})" \
            if len(findings) > 1 else ""
        raise refuse(f.rule, f"nisa.{name}: {f.cited()}{more}",
                     *[v for v in ops.values() if isinstance(v, (Tensor, AccessPattern))])
    return spec.resolve_engine(name, engine, described, attrs)


def _raise_finding(f: "spec.Finding | None", *objs: Any) -> None:
    if f is not None:
        raise refuse(f.rule, f.cited(), *objs)


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


def _fn(op: Any, api: str) -> Callable:
    """The numpy function of an operator the specification accepted."""
    name = spec.name_of(op)
    if name in spec.ops.UNARY:
        return unary_alu(name) if name != "invert" else ALL_OPS["invert"].fn
    o = ALL_OPS.get(name or "")
    if o is None:
        raise refuse("unsupported-op", f"{api}: operator {op!r} is not implemented by the simulator")
    return o.fn


def _rows(t: Tensor) -> np.ndarray:
    return t.array.reshape(t.partitions, t.free_size)


def _psum_written(d: Tensor, by_matmul: bool) -> None:
    """Track which PSUM elements a matmul vs another instruction wrote last (accumulation rules)."""
    a = d.alloc
    if a.buffer != "psum":
        return
    for attr in ("mm_written", "other_written"):
        if getattr(a, attr) is None:
            setattr(a, attr, np.zeros(a.shape, dtype=bool))
    sl = d._slices()
    a.mm_written[sl] = by_matmul
    a.other_written[sl] = not by_matmul


def _write(dst: Tensor, values: np.ndarray, bits: bool = False) -> None:
    """Cast on write; ``bits``: a bitvec result, stored as its bit pattern (no dtype casting)."""
    if bits and not dt.is_float(dst.dtype):
        w = 8 * dst.dtype.itemsize
        values = np.asarray(values).astype(np.int64) & ((1 << w) - 1)
        if dst.dtype.kind == "i":
            values = values - ((values >> (w - 1)) << w)
    elif not dt.is_float(dst.dtype):
        _raise_finding(spec.float_to_int_finding(values, dt.NAMES[dst.dtype]), dst)
    dst.array[...] = dt.cast_to(values, dst.dtype).reshape(dst.shape)
    _psum_written(dst, False)


def _apply(op: Any, fn: Callable, a: np.ndarray, b: Any, native_int: bool) -> np.ndarray:
    """``a op b``: bitvec exactly on integers, GpSimd integer arithmetic exactly (the caller refuses
    results that leave the destination's 32 bits), the rest in float32."""
    name = spec.name_of(op)
    if native_int and name not in spec.ops.BITVEC:
        native = INT_NATIVE.get(name or "")
        if native is None:
            raise refuse("unsupported-op", f"operator {op!r} on GpSimd integers is not implemented "
                         "by the simulator")
        return np.asarray(native(np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64)))
    if name in spec.ops.BITVEC:
        return fn(np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64))
    return fn(dt.to_f32(np.asarray(a)), dt.to_f32(np.asarray(b)))


# --- DMA ---------------------------------------------------------------------------------------

@_instr
def dma_copy(ctx: KernelContext, *, dst: Any, src: Any, dst_rmw_op: Any = None,
             oob_mode: Any = None, dge_mode: Any = None, priority: Any = None,
             engine: Any = None) -> None:
    """HBM/SBUF -> HBM/SBUF transfer of equally many elements; a dtype difference is a cast
    through fp32."""
    api = "nisa.dma_copy"
    for role, x in (("dst", dst), ("src", src)):
        if not isinstance(x, (Tensor, AccessPattern)):
            raise refuse("operand", f"{api}: {role} must be a tile region or an HBM access "
                         f"pattern, got {type(x).__name__}")
    if dst_rmw_op is not None:
        raise refuse("unsupported", f"{api}: dst_rmw_op is not an NKI 0.3 argument (use "
                     "nisa.dma_compute)", dst)
    _conform(ctx, "dma_copy", None, {"dst": dst, "src": src})
    values = src.read() if isinstance(src, AccessPattern) else src.array
    if dst.dtype != src.dtype:
        if not dt.is_float(dst.dtype) and dt.is_float(src.dtype):
            _raise_finding(spec.float_to_int_finding(values, dt.NAMES[dst.dtype]), dst)
        values = dt.cast_to(dt.to_f32(values), dst.dtype)
    values = np.asarray(values).reshape(dst.shape)
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
    d = _tile(dst, "dst", api)
    s = _tile(stationary, "stationary", api)
    m = _tile(moving, "moving", api)
    _conform(ctx, "nc_matmul", "tensor", {"dst": d, "stationary": s, "moving": m},
             {"accumulate": accumulate})
    k, n = s.partitions, m.free_size
    if is_transpose:
        _raise_finding(spec.transpose_nonfinite_finding("tensor", ctx.target, _rows(s)), s)
    res = (dt.to_f32(_rows(s)).T @ dt.to_f32(_rows(m))).reshape(d.shape)
    alloc = d.alloc
    if alloc.mm_written is None:
        alloc.mm_written = np.zeros(alloc.shape, dtype=bool)
        alloc.other_written = np.zeros(alloc.shape, dtype=bool)
    sl = d._slices()
    seen = alloc.mm_written[sl]
    out = d.array
    if accumulate is None:
        out[...] = np.where(seen, out + res, res)
    elif accumulate:
        other = alloc.other_written[sl]
        if spec.accumulate_onto_nonmatmul_refused(ctx.target):
            if other.any():
                _raise_finding(spec.Finding("matmul-accumulate-nonmatmul", f"{api}(accumulate=True) onto "
                               f"{int(other.sum())} PSUM element(s) last written by a non-matmul instruction "
                               f"(memset/tensor_copy/...), undefined on {ctx.target.name}"), d)
        else:  # from NeuronCore-v4 a value-initialised location may be accumulated onto
            seen = seen | other
        if not seen.all():
            _raise_finding(spec.Finding("matmul-first-overwrite", f"{api}(accumulate=True) onto "
                           f"{int((~seen).sum())} PSUM element(s) no matmul has initialised; the first "
                           "matmul into a location must use accumulate=False"), d)
        out += res
    else:
        out[...] = res
    _psum_written(d, True)
    ctx.count("tensor", "nc_matmul", k, n, operands=(d, s, m), dims=(k, s.free_size, n))


@_instr
def nc_transpose(ctx: KernelContext, *, dst: Any, data: Any, engine: Any = None) -> None:
    """dst[F, P] = data[P, F]: TensorE (SBUF->PSUM, <=128x128) or VectorE (<=32x32)."""
    api = "nisa.nc_transpose"
    d, x = _tile(dst, "dst", api), _tile(data, "data", api)
    eng = _conform(ctx, "nc_transpose", _engine_name(engine), {"dst": d, "data": x})
    p, f = x.partitions, x.free_size
    _raise_finding(spec.transpose_nonfinite_finding(eng, ctx.target, _rows(x)), x)
    d.array[...] = _rows(x).T.reshape(d.shape)  # same dtype: a bit-exact move
    _psum_written(d, eng == "tensor")
    ctx.count(eng, "nc_transpose", p, f, operands=(d, x), dims=(p, f))


# --- ScalarE -----------------------------------------------------------------------------------

@_instr
def activation(ctx: KernelContext, *, dst: Any, op: Any, data: Any, bias: Any = None,
               scale: Any = 1.0, reduce_op: Any = None, reduce_res: Any = None,
               reduce_cmd: Any = None) -> None:
    """dst = op(data * scale + bias); optionally reduce_res = row-sum(result)."""
    api = "nisa.activation"
    d, x = _tile(dst, "dst", api), _tile(data, "data", api)
    p = x.partitions
    ops: dict[str, Any] = {"dst": d, "data": x}
    if isinstance(scale, (Tensor, AccessPattern)):
        ops["scale"] = _column(scale, "scale", api, p)
    elif not isinstance(scale, _SCALARS):
        raise refuse("activation-operand", f"{api}: scale must be a number or a [P, 1] tile, "
                     f"got {type(scale).__name__}")
    if bias is not None:
        ops["bias"] = _column(bias, "bias", api, p) if isinstance(bias, (Tensor, AccessPattern)) else bias
    if reduce_res is not None:
        ops["reduce_res"] = _column(reduce_res, "reduce_res", api, p)
    _conform(ctx, "activation", "scalar", ops, {"op": op, "reduce_op": reduce_op})
    _same_partitions(api, d, x)
    _same_free(api, d, x)
    v = dt.to_f32(_rows(x))
    v = v * (dt.to_f32(_rows(ops["scale"])) if "scale" in ops else np.float32(scale))
    if bias is not None:
        v = v + (dt.to_f32(_rows(ops["bias"])) if isinstance(ops["bias"], Tensor) else np.float32(bias))
    _raise_finding(spec.activation_range_finding(op, v), x)
    f = ALL_OPS.get(spec.name_of(op) or "")
    if f is None:
        raise refuse("unsupported-op", f"{api}: activation {op!r} is not implemented by the simulator")
    y = f.fn(v)
    _write(d, y)
    if reduce_res is not None:
        if reduce_op is None:
            raise refuse("activation-operand", f"{api}: reduce_res needs reduce_op=nl.add", d)
        _write(ops["reduce_res"], REDUCERS["add"](y, axis=1, keepdims=True))
    ctx.count("scalar", "activation", p, x.free_size, operands=(d, x))


# --- VectorE / GpSimd --------------------------------------------------------------------------

def _fp32_compare_check(op: Any, eng: str, native: bool, arrays: list[tuple[str, Any]],
                        *objs: Any) -> None:
    if native:
        return
    _raise_finding(spec.int_compare_finding(op, eng, [(r, np.asarray(a)) for r, a in arrays]), *objs)


@_instr
def tensor_tensor(ctx: KernelContext, *, dst: Any, data1: Any, data2: Any, op: Any,
                  engine: Any = None) -> None:
    """dst = data1 op data2 (same partitions and elements per partition)."""
    api = "nisa.tensor_tensor"
    d = _tile(dst, "dst", api)
    a = _tile(data1, "data1", api)
    b = _tile(data2, "data2", api)
    eng = _conform(ctx, "tensor_tensor", _engine_name(engine), {"dst": d, "data1": a, "data2": b},
                   {"op": op})
    _same_partitions(api, d, a, b)
    _same_free(api, a, b)
    _same_free(api, d, a)
    native = eng == "gpsimd" and all(t.dtype in (dt.int32, dt.uint32) for t in (d, a, b))
    _fp32_compare_check(op, eng, native, [("data1", _rows(a)), ("data2", _rows(b))], a, b)
    r = _apply(op, _fn(op, api), _rows(a), _rows(b), native)
    if native and spec.name_of(op) not in spec.ops.BITVEC:
        _raise_finding(spec.int_overflow_finding(op, _rows(a), _rows(b), dt.NAMES[d.dtype]), d, a, b)
    _write(d, r, bits=spec.name_of(op) in spec.ops.BITVEC)
    ctx.count(eng, "tensor_tensor", a.partitions, a.free_size, operands=(d, a, b))


def _scalar_operand(x: Any, role: str, api: str, p: int) -> Any:
    if isinstance(x, (Tensor, AccessPattern)):
        return _column(x, role, api, p)
    if x is None or isinstance(x, _SCALARS):
        return x
    raise refuse("operand", f"{api}: {role} must be a number or a [P, 1] tile, got "
                 f"{type(x).__name__}")


@_instr
def tensor_scalar(ctx: KernelContext, *, dst: Any, data: Any, op0: Any, operand0: Any = None,
                  reverse0: bool = False, op1: Any = None, operand1: Any = None,
                  reverse1: bool = False, engine: Any = None) -> None:
    """dst = (data op0 operand0) op1 operand1, operands scalar or [P, 1] (broadcast on free)."""
    api = "nisa.tensor_scalar"
    d = _tile(dst, "dst", api)
    x = _tile(data, "data", api)
    c0 = _scalar_operand(operand0, "operand0", api, x.partitions)
    c1 = _scalar_operand(operand1, "operand1", api, x.partitions)
    ops = {"dst": d, "data": x, "operand0": c0}
    if op1 is not None:
        ops["operand1"] = c1
    eng = _conform(ctx, "tensor_scalar", _engine_name(engine), ops, {"op0": op0, "op1": op1})
    _same_partitions(api, d, x)
    _same_free(api, d, x)
    v = _rows(x)
    steps = [(op0, c0, reverse0, "operand0")] + ([(op1, c1, reverse1, "operand1")] if op1 is not None else [])
    for o, c, rev, role in steps:
        cv = _rows(c) if isinstance(c, Tensor) else (0.0 if c is None else c)
        _fp32_compare_check(o, eng, False, [("data", v), (role, cv)], x)
        fn = _fn(o, api)
        v = _apply(o, fn, cv, v, False) if rev else _apply(o, fn, v, cv, False)
    _write(d, v, bits=spec.name_of(op0) in spec.ops.BITVEC)
    ctx.count(eng, "tensor_scalar", x.partitions, x.free_size, operands=(d, x))


@_instr
def tensor_reduce(ctx: KernelContext, *, dst: Any, op: Any, data: Any, axis: Any,
                  negate: bool = False, keepdims: bool = False) -> None:
    """Reduce free axes (contiguous, ending at the last one); never the partition axis."""
    api = "nisa.tensor_reduce"
    d, x = _tile(dst, "dst", api), _tile(data, "data", api)
    _conform(ctx, "tensor_reduce", None, {"dst": d, "data": x}, {"op": op})
    name = spec.name_of(op)
    if name not in REDUCERS:
        raise refuse("unsupported-op", f"{api}: reduction {op!r} is not implemented by the simulator")
    _raise_finding(spec.reduce_axis_finding(axis, x.ndim), x)
    axes = tuple(sorted(int(a) % x.ndim for a in (axis if isinstance(axis, (tuple, list)) else (axis,))))
    _same_partitions(api, d, x)
    res = REDUCERS[name](dt.to_f32(x.array), axis=axes, keepdims=True)
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
    d, s = _tile(dst, "dst", api), _tile(src, "src", api)
    eng = _conform(ctx, "tensor_copy", _engine_name(engine), {"dst": d, "src": s})
    _same_partitions(api, d, s)
    _same_free(api, d, s)
    if s.dtype == d.dtype and eng != "scalar":
        d.array[...] = s.array.reshape(d.shape)
        _psum_written(d, False)
    else:
        _write(d, dt.to_f32(s.array))
    ctx.count(eng, "tensor_copy", s.partitions, s.free_size, operands=(d, s))


@_instr
def tensor_copy_predicated(ctx: KernelContext, *, dst: Any, src: Any, predicate: Any,
                           reverse_pred: bool = False) -> None:
    """dst = src where predicate != 0 (== 0 with reverse_pred); elsewhere dst is kept."""
    api = "nisa.tensor_copy_predicated"
    d, s, p = _tile(dst, "dst", api), _tile(src, "src", api), _tile(predicate, "predicate", api)
    _conform(ctx, "tensor_copy_predicated", None, {"dst": d, "src": s, "predicate": p})
    _same_partitions(api, d, s, p)
    _same_free(api, d, s)
    _same_free(api, d, p)
    mask = (p.array != 0).reshape(d.shape)
    if reverse_pred:
        mask = ~mask
    np.copyto(d.array, s.array.reshape(d.shape), where=mask)
    _psum_written(d, False)
    ctx.count("vector", "tensor_copy_predicated", s.partitions, s.free_size,
              operands=(d, s, p))


@_instr
def memset(ctx: KernelContext, *, dst: Any, value: Any, engine: Any = None) -> None:
    """Fill a region with a constant of the destination's type."""
    api = "nisa.memset"
    d = _tile(dst, "dst", api)
    if not isinstance(value, _SCALARS):
        raise refuse("operand", f"{api}: value must be a number, got {type(value).__name__}", d)
    eng = _conform(ctx, "memset", _engine_name(engine), {"dst": d}, {"value": value})
    d.array[...] = dt.cast_to(np.array([value], dtype=np.float64 if isinstance(value, float)
                                       else None), d.dtype)[0]
    _psum_written(d, False)
    ctx.count(eng, "memset", d.partitions, d.free_size, operands=(d,))


@_instr
def iota(ctx: KernelContext, *, dst: Any, pattern: Any, offset: int = 0,
         channel_multiplier: int = 0) -> None:
    """dst[p, f...] = offset + channel_multiplier*p + sum(stride_i * f_i), int32 math (GpSimd)."""
    api = "nisa.iota"
    d = _tile(dst, "dst", api)
    _conform(ctx, "iota", None, {"dst": d}, {"pattern": pattern})
    try:
        pat = [(int(s), int(c)) for s, c in pattern]
    except (TypeError, ValueError):
        raise refuse("operand", f"{api}: pattern must be [[stride, count], ...]", d) from None
    counts = [c for _, c in pat]
    if int(np.prod(counts)) != d.free_size:
        _raise_finding(spec.Finding("iota-pattern", f"{api}: pattern counts {counts} do not multiply to "
                                    f"the {d.free_size} elements per partition of dst {list(d.shape)}"), d)
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


@_instr
def tensor_tensor_scan(ctx: KernelContext, *, dst: Any, data0: Any, data1: Any, initial: Any,
                       op0: Any, op1: Any, reverse0: bool = False, reverse1: bool = False) -> None:
    """Per partition ``r[i] = op1(op0(data0[i], r[i-1]), data1[i])`` with ``r[-1] = initial``, in
    fp32; each result is cast to dst's dtype and that value carries on (the docstring's numpy
    recurrence reads ``result[:, i-1]`` back from the output array)."""
    api = "nisa.tensor_tensor_scan"
    d, a, b = _tile(dst, "dst", api), _tile(data0, "data0", api), _tile(data1, "data1", api)
    tile_init = isinstance(initial, (Tensor, AccessPattern))
    init = _tile(initial, "initial", api) if tile_init else initial
    _conform(ctx, "tensor_tensor_scan", None, {"dst": d, "data0": a, "data1": b, "initial": init},
             {"op0": op0, "op1": op1})
    _same_partitions(api, d, a, b, *([init] if tile_init else []))
    _same_free(api, a, b)
    _same_free(api, d, a)
    f0, f1 = _fn(op0, api), _fn(op1, api)
    x0, x1 = dt.to_f32(_rows(a)), dt.to_f32(_rows(b))
    prev = dt.to_f32(_rows(init)).reshape(-1) if isinstance(init, Tensor) else \
        np.full(a.partitions, np.float32(init), dtype=np.float32)
    out = np.empty(x0.shape, dtype=np.float32)
    for i in range(x0.shape[1]):
        t = f0(prev, x0[:, i]) if reverse0 else f0(x0[:, i], prev)
        r = f1(x1[:, i], t) if reverse1 else f1(t, x1[:, i])
        if not dt.is_float(d.dtype):
            _raise_finding(spec.float_to_int_finding(np.asarray(r, dtype=np.float32), dt.NAMES[d.dtype]), d)
        prev = dt.to_f32(dt.cast_to(np.asarray(r, dtype=np.float32), d.dtype))
        out[:, i] = prev
    _write(d, out)
    ctx.count("vector", "tensor_tensor_scan", a.partitions, a.free_size, operands=(d, a, b))


@_instr
def nc_n_gather(ctx: KernelContext, *, dst: Any, data: Any, indices: Any) -> None:
    """Per partition, ``dst[p, j] = data[p, indices[p, j]]`` over data's flattened free elements;
    a bit-exact move on GpSimd, SBUF only."""
    api = "nisa.nc_n_gather"
    d, x, i = _tile(dst, "dst", api), _tile(data, "data", api), _tile(indices, "indices", api)
    _conform(ctx, "nc_n_gather", None, {"dst": d, "data": x, "indices": i})
    _same_partitions(api, d, x, i)
    idx = _rows(i).astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= x.free_size):
        _raise_finding(spec.Finding("gather-dtype", f"{api}: index {int(idx.max() if idx.max() >= x.free_size else idx.min())} "
                                    f"outside [0, {x.free_size})"), i)
    d.array[...] = np.take_along_axis(_rows(x), idx, axis=1).reshape(d.shape)
    ctx.count("gpsimd", "nc_n_gather", x.partitions, i.free_size, operands=(d, x, i))


def __getattr__(name: str) -> Any:
    raise AttributeError(f"nisa.{name} is not supported by the neuron_inductor NKI simulator "
                         "(see the NKI subset contract in neuron_inductor/runtime/sim)")
