"""Check one instruction call against the specification: the single implementation of the rules.

Callers describe the call abstractly (engine, operand memories/dtypes/sizes, literal values,
operator names) and get back a list of :class:`Finding`; the IR verifier, the simulator and the
static check of emitted kernel source all use these functions, so one rule means one thing
everywhere. Unknown facts (``None`` sizes or dtypes in a static check) never produce a finding.
Value rules (activation input ranges, integer comparisons above 2^24) need data and are checked by
:func:`activation_range_finding` and :func:`int_compare_finding` at run time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..target import Target, get_target
from .instrs import (FLOAT_DTYPES, INSTRS, INT_DTYPES, MATMUL_ACCUMULATE_NONMATMUL_REFUSED, MATMUL_DST_DTYPES,
                     MATMUL_IN_DTYPES, MATMUL_MOVING_FMAX, PREDICATE_DTYPES, DTYPES)
from .ops import (ACT_RANGE, ALU_ENGINES, BITVEC, COMPARE, REDUCTION, UNARY, ActFunc, AluOp, act_func,
                  alu_op, name_of)
from .rules import Finding

#: fp32 represents every integer of magnitude <= 2^24 exactly
FP32_EXACT_INT = 2 ** 24


@dataclass(frozen=True)
class Opnd:
    """A tile or HBM operand as far as the rules care: memory, dtype (``nl`` name), sizes."""

    memory: str
    dtype: str | None
    partitions: int | None = None
    free: int | None = None


def _target(t: Target | str | None) -> Target:
    return t if isinstance(t, Target) else get_target(t)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float, np.number)) and not isinstance(v, Opnd)


def _is_int_literal(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def resolve_engine(name: str, engine: str | None, ops: dict[str, Any], attrs: dict[str, Any]) -> str:
    """The engine a call runs on; ``None``/``"unknown"`` picks the documented default."""
    spec = INSTRS[name]
    if engine not in (None, "unknown"):
        return engine  # type: ignore[return-value]
    tiles = [v for v in ops.values() if isinstance(v, Opnd)]
    if name == "tensor_tensor":
        if name_of(attrs.get("op")) == "power":
            return "gpsimd"
        if name_of(attrs.get("op")) not in BITVEC and tiles and \
                all(t.dtype in ("int32", "uint32") for t in tiles) and all(t.memory != "psum" for t in tiles):
            return "gpsimd"  # arithmetic on all-int32/uint32 tiles defaults to GpSimd (native integers)
    if name == "nc_transpose":
        d, x = ops.get("dst"), ops.get("data")
        if isinstance(d, Opnd) and isinstance(x, Opnd) and (x.memory, d.memory) != ("sbuf", "psum"):
            return "vector"
    return spec.default_engine


def check_instr(name: str, engine: str | None, target: Target | str | None, ops: dict[str, Any],
                attrs: dict[str, Any] | None = None) -> list[Finding]:
    """Every static rule broken by one call of ``nisa.<name>``.

    ``ops`` maps keyword -> :class:`Opnd` (tiles, HBM sides), a Python number (literals) or None;
    ``attrs`` the remaining keywords (operators by any spelling, flags, patterns)."""
    attrs = attrs or {}
    spec = INSTRS.get(name)
    if spec is None:
        return [Finding("instr-known", f"nisa.{name} is not an instruction of the specification")]
    t = _target(target)
    nc = t.nc_version
    eng = resolve_engine(name, engine, ops, attrs)
    out: list[Finding] = []
    allowed = spec.engines.get(nc, spec.engines[max(spec.engines)])
    if eng not in allowed:
        if name == "tensor_copy" and eng == "scalar" and nc == 2:
            out.append(Finding("tensor-copy-scalar-v2", f"tensor_copy on the Scalar Engine of {t.name} "
                               "(NeuronCore-v2); use activation(op=nl.copy)"))
        else:
            out.append(Finding("engine-allowed", f"nisa.{name} cannot run on the {eng} engine on {t.name} "
                               f"(allowed: {', '.join(allowed)})"))
    tiles = {k: v for k, v in ops.items() if isinstance(v, Opnd)}
    for k, v in tiles.items():
        if v.dtype is not None and v.dtype not in DTYPES:
            out.append(Finding("dtype-known", f"{name} {k} has dtype {v.dtype}, not an NKI dtype"))
    if name != "dma_copy":
        for k, v in tiles.items():
            if v.memory == "hbm":
                out.append(Finding("memory", f"{name} {k} is in HBM; compute instructions take SBUF/PSUM "
                                   "operands only"))
        if eng == "gpsimd":
            for k, v in tiles.items():
                if v.memory == "psum":
                    out.append(Finding("gpsimd-no-psum", f"{name} on GpSimd: {k} is in PSUM"))
    check = _CHECKS.get(name)
    if check is not None:
        check(out, eng, t, ops, attrs)
    return out


def _alu(out: list[Finding], instr: str, role: str, op: Any) -> AluOp | None:
    a = alu_op(op)
    if a is None:
        out.append(Finding("alu-op-table", f"{instr} {role}={name_of(op) or op!r} is not an ALU operator "
                           "(table tbl-aluop; divide is not one: use reciprocal, then multiply)"))
    return a


def _alu_engine(out: list[Finding], instr: str, op: AluOp, eng: str, nc: int) -> None:
    engines = ALU_ENGINES.get(op)
    if engines is not None and eng not in engines[nc]:
        out.append(Finding("alu-op-engine", f"{instr}: operator {op} is not supported on the {eng} engine "
                           f"of NeuronCore-v{nc} (supported: {', '.join(sorted(engines[nc]))})"))


def _ints(out: list[Finding], instr: str, op: AluOp, ops: dict[str, Any], roles: tuple[str, ...]) -> None:
    for r in roles:
        v = ops.get(r)
        if isinstance(v, Opnd) and v.dtype is not None and v.dtype not in INT_DTYPES:
            out.append(Finding("bitvec-integer", f"{instr}: bitvec operator {op} needs integer tiles, "
                               f"{r} is {v.dtype}"))


def _mem(out: list[Finding], instr: str, ops: dict[str, Any], role: str, allowed: tuple[str, ...],
         why: str = "") -> None:
    v = ops.get(role)
    if isinstance(v, Opnd) and v.memory not in allowed:
        out.append(Finding("memory", f"{instr}: {role} is in {v.memory.upper()}; allowed: "
                           f"{'/'.join(m.upper() for m in allowed)}{why}"))


def _c_tensor_tensor(out, eng, t, ops, attrs) -> None:
    op = _alu(out, "tensor_tensor", "op", attrs.get("op"))
    tiles = [v for k, v in ops.items() if isinstance(v, Opnd) and k in ("dst", "data1", "data2")]
    if op is not None:
        native_int = eng == "gpsimd" and op not in BITVEC and tiles and \
            all(v.dtype in ("int32", "uint32") for v in tiles)
        if op in UNARY:
            out.append(Finding("alu-op-table", f"tensor_tensor op={op} is a unary operator"))
        elif not native_int:
            _alu_engine(out, "tensor_tensor", op, eng, t.nc_version)
        if op in BITVEC:
            _ints(out, "tensor_tensor", op, ops, ("dst", "data1", "data2"))
    a, b = ops.get("data1"), ops.get("data2")
    if isinstance(a, Opnd) and isinstance(b, Opnd) and a.memory == b.memory == "psum":
        out.append(Finding("psum-inputs", "tensor_tensor: data1 and data2 are both in PSUM"))


_TS_SCALAR_COMBOS = {("multiply", "add"), ("multiply", None), ("add", None)}


def _c_tensor_scalar(out, eng, t, ops, attrs) -> None:
    steps = [("op0", "operand0")] + ([("op1", "operand1")] if attrs.get("op1") is not None else [])
    alus = [_alu(out, "tensor_scalar", o, attrs.get(o)) for o, _ in steps]
    known = [a for a in alus if a is not None]
    if len(known) == 2 and (known[0] in BITVEC) != (known[1] in BITVEC):
        out.append(Finding("op-class-mix", f"tensor_scalar: op0={known[0]} and op1={known[1]} mix bitvec "
                           "and arithmetic operators"))
    if eng == "gpsimd" and any(a != AluOp.rsqrt for a in known):
        out.append(Finding("tensor-scalar-gpsimd-rsqrt", f"tensor_scalar on GpSimd with "
                           f"{', '.join(map(str, known))}; GpSimd is only allowed for rsqrt"))
    elif eng == "scalar" and t.nc_version >= 3:
        # documented for trn2; the v4 docs lift it nowhere explicitly, so trn3 keeps it
        combo = (name_of(attrs.get("op0")), name_of(attrs.get("op1")))
        if combo not in _TS_SCALAR_COMBOS:
            out.append(Finding("tensor-scalar-scalar-combo", f"tensor_scalar on the Scalar Engine of "
                               f"{t.name} with (op0, op1) = {combo}"))
    elif eng != "gpsimd":
        for a in known:
            _alu_engine(out, "tensor_scalar", a, eng, t.nc_version)
    for a, (_, role) in zip(alus, steps):
        if a is None:
            continue
        v = ops[role] if role in ops else attrs.get(role)
        if a in BITVEC:
            _ints(out, "tensor_scalar", a, ops, ("dst", "data"))
            if isinstance(v, Opnd) and v.dtype != "float32":
                out.append(Finding("tensor-scalar-fp32-operand", f"tensor_scalar: {role} of bitvec {a} is a "
                                   f"{v.dtype or 'non-float32'} tile; tile operands must be float32, so "
                                   "bitvec operators take integer literals (broadcast integer rows another way)"))
            elif isinstance(v, Opnd):
                out.append(Finding("bitvec-integer", f"tensor_scalar: bitvec operator {a} with a float32 "
                                   f"{role} tile; bitvec operators need integer operands"))
            continue
        if a in UNARY:
            if not (v is None or (_is_num(v) and not isinstance(v, bool) and v == 0)):
                out.append(Finding("unary-operand", f"tensor_scalar: {role} of unary {a} must be None or 0"))
            continue
        if isinstance(v, Opnd):
            if v.dtype is not None and v.dtype != "float32":
                out.append(Finding("tensor-scalar-fp32-operand", f"tensor_scalar: {role} tile is {v.dtype}; "
                                   "operands of arithmetic operators must be float32"))
        elif v is None or isinstance(v, (bool, np.bool_)) or not _is_num(v):
            # Python int literals are fine: AWS's own kernels (nki-library) pass operand0=-1 / 1 / 2
            out.append(Finding("tensor-scalar-fp32-operand", f"tensor_scalar: {role}={v!r} is not a number; "
                               "operands of arithmetic operators must be float32"))


def _c_tensor_reduce(out, eng, t, ops, attrs) -> None:
    op = _alu(out, "tensor_reduce", "op", attrs.get("op"))
    if op is None:
        return
    if op not in REDUCTION:
        out.append(Finding("reduce-op-legal", f"tensor_reduce op={op} is not a legal reduction operator"))
    if op in BITVEC:
        _ints(out, "tensor_reduce", op, ops, ("dst", "data"))


def _c_activation(out, eng, t, ops, attrs) -> None:
    f = act_func(attrs.get("op"))
    if f is None:
        out.append(Finding("activation-func-table", f"activation op={name_of(attrs.get('op')) or attrs.get('op')!r}"
                           " is not a Scalar Engine activation function (table tbl-act-func; no cos)"))
    r = attrs.get("reduce_op")
    if r is not None and name_of(r) != "add":
        out.append(Finding("activation-reduce-add", f"activation reduce_op={name_of(r) or r!r}; must be nl.add"))
    for role in ("dst", "data", "scale", "bias", "reduce_res"):
        _mem(out, "activation", ops, role, ("sbuf", "psum"))
    sc = ops["scale"] if "scale" in ops else attrs.get("scale")
    if isinstance(sc, Opnd) and sc.dtype is not None and sc.dtype != "float32":
        out.append(Finding("activation-scale-fp32", f"activation scale tile is {sc.dtype}; must be float32"))
    b = ops["bias"] if "bias" in ops else attrs.get("bias")
    if b is not None:
        if not isinstance(b, Opnd) and t.nc_version < 3:
            out.append(Finding("activation-bias", f"activation bias={b!r} is a scalar; NeuronCore-v2 "
                               f"({t.name}) takes a [N, 1] bias tile only"))
        elif isinstance(b, Opnd) and b.dtype == "tfloat32":
            out.append(Finding("activation-bias", "activation bias tile is tfloat32"))
        if f == ActFunc.reciprocal and t.nc_version < 3:
            out.append(Finding("activation-reciprocal-bias-v2", f"activation(op=nl.reciprocal) with a bias on "
                               f"{t.name} (NeuronCore-v2)"))


def _c_nc_transpose(out, eng, t, ops, attrs) -> None:
    d, x = ops.get("dst"), ops.get("data")
    if eng == "tensor":
        _mem(out, "nc_transpose", ops, "data", ("sbuf",), " (TensorE reads SBUF)")
        _mem(out, "nc_transpose", ops, "dst", ("psum",), " (TensorE writes PSUM)")
    if isinstance(d, Opnd) and isinstance(x, Opnd):
        if d.dtype and x.dtype and d.dtype != x.dtype:
            out.append(Finding("transpose-same-dtype", f"nc_transpose: dst is {d.dtype}, data is {x.dtype}; "
                               "the output must have the input's dtype (cast on the eviction instead)"))
        lim = 128 if eng == "tensor" else 32
        if x.partitions is not None and x.free is not None:
            if x.partitions > lim or x.free > lim:
                out.append(Finding("transpose-shape", f"nc_transpose [{x.partitions}, {x.free}] exceeds "
                                   f"[{lim}, {lim}] on the {eng} engine"))
            if d.partitions is not None and d.free is not None and (d.partitions, d.free) != (x.free, x.partitions):
                out.append(Finding("transpose-shape", f"nc_transpose dst [{d.partitions}, {d.free}] must be "
                                   f"[{x.free}, {x.partitions}]"))


def _c_nc_matmul(out, eng, t, ops, attrs) -> None:
    _mem(out, "nc_matmul", ops, "stationary", ("sbuf",))
    _mem(out, "nc_matmul", ops, "moving", ("sbuf",))
    _mem(out, "nc_matmul", ops, "dst", ("psum",))
    s, m, d = ops.get("stationary"), ops.get("moving"), ops.get("dst")
    nc = t.nc_version
    ins, dsts = MATMUL_IN_DTYPES[nc], MATMUL_DST_DTYPES[nc]
    for role, v in (("stationary", s), ("moving", m)):
        if isinstance(v, Opnd) and v.dtype is not None and v.dtype not in ins:
            out.append(Finding("matmul-dtype", f"nc_matmul {role} is {v.dtype}; inputs on {t.name} are "
                               f"{'/'.join(sorted(ins))}"))
    if isinstance(s, Opnd) and isinstance(m, Opnd) and s.dtype and m.dtype:
        f32 = ("float32", "tfloat32")
        if (s.dtype in f32) != (m.dtype in f32):
            out.append(Finding("matmul-dtype", f"nc_matmul: {s.dtype} x {m.dtype}; fp32/tf32 pairs only "
                               "with fp32/tf32"))
        if {s.dtype, m.dtype} == {"float8_e4m3", "float8_e4m3fn"}:
            out.append(Finding("matmul-dtype", "nc_matmul: legacy float8_e4m3 and OCP float8_e4m3fn "
                               "cannot be mixed"))
    if isinstance(d, Opnd) and d.dtype is not None and d.dtype not in dsts:
        out.append(Finding("matmul-dtype", f"nc_matmul dst is {d.dtype}; must be {'/'.join(sorted(dsts))} "
                           f"on {t.name}"))
    if isinstance(s, Opnd) and isinstance(m, Opnd) and None not in (s.partitions, s.free, m.partitions, m.free):
        problems = []
        if s.partitions != m.partitions:
            problems.append(f"K differs ({s.partitions} vs {m.partitions})")
        if max(s.partitions, m.partitions) > t.matmul_k_max:
            problems.append(f"K={max(s.partitions, m.partitions)} > {t.matmul_k_max}")
        if s.free > t.matmul_m_max:
            problems.append(f"stationary free {s.free} > {t.matmul_m_max}")
        fmax = MATMUL_MOVING_FMAX[nc]
        nmax = fmax.get(d.dtype if isinstance(d, Opnd) and d.dtype in fmax else "float32", fmax["float32"])
        if m.free > nmax:
            problems.append(f"moving free {m.free} > {nmax} on {t.name}")
        if isinstance(d, Opnd) and None not in (d.partitions, d.free) and (d.partitions, d.free) != (s.free, m.free):
            problems.append(f"dst is [{d.partitions}, {d.free}], expected [{s.free}, {m.free}]")
        if problems:
            out.append(Finding("matmul-shape", "nc_matmul: " + "; ".join(problems)))


def _c_tensor_copy(out, eng, t, ops, attrs) -> None:
    for role in ("dst", "src"):
        _mem(out, "tensor_copy", ops, role, ("sbuf", "psum"))


def _c_tensor_copy_predicated(out, eng, t, ops, attrs) -> None:
    d, s, p = ops.get("dst"), ops.get("src"), ops.get("predicate")
    if isinstance(p, Opnd) and p.dtype is not None and p.dtype not in PREDICATE_DTYPES:
        out.append(Finding("predicate-dtype", f"tensor_copy_predicated predicate is {p.dtype}; "
                           "must be uint8/uint16/uint32"))
    if isinstance(d, Opnd) and isinstance(s, Opnd) and d.dtype and s.dtype and d.dtype != s.dtype:
        out.append(Finding("predicate-dtype", f"tensor_copy_predicated: src {s.dtype} and dst {d.dtype} "
                           "must share a dtype"))
    if isinstance(s, Opnd) and isinstance(p, Opnd) and s.memory == p.memory == "psum":
        out.append(Finding("psum-inputs", "tensor_copy_predicated: src and predicate are both in PSUM"))


def _c_memset(out, eng, t, ops, attrs) -> None:
    d, v = ops.get("dst"), ops.get("value", attrs.get("value"))
    if not isinstance(d, Opnd) or d.dtype is None or v is None:
        return
    # the migration guide's example is a float literal into an int32 tile; an int literal into a
    # float tile (value=0) is what AWS's own kernels (nki-library) do, so it is not refused
    if d.dtype in INT_DTYPES and not isinstance(v, (int, np.integer)):
        out.append(Finding("memset-literal-type", f"memset value={v!r} into a {d.dtype} tile; "
                           "use an integer literal"))


def _c_iota(out, eng, t, ops, attrs) -> None:
    _mem(out, "iota", ops, "dst", ("sbuf",))
    pat = attrs.get("pattern")
    if isinstance(pat, (list, tuple)) and len(pat) > 4:
        out.append(Finding("iota-pattern", f"iota pattern has {len(pat)} dimensions; at most 4"))


def _c_affine_select(out, eng, t, ops, attrs) -> None:
    _mem(out, "affine_select", ops, "dst", ("sbuf",))
    _mem(out, "affine_select", ops, "on_true_tile", ("sbuf",))


def _c_tensor_tensor_scan(out, eng, t, ops, attrs) -> None:
    for role in ("op0", "op1"):
        op = _alu(out, "tensor_tensor_scan", role, attrs.get(role))
        if op is None:
            continue
        if op in UNARY or op in BITVEC:
            out.append(Finding("scan-operator", f"tensor_tensor_scan {role}={op} is not a binary arithmetic "
                               "operator"))
        else:
            _alu_engine(out, "tensor_tensor_scan", op, eng, t.nc_version)
    a, b = ops.get("data0"), ops.get("data1")
    if isinstance(a, Opnd) and isinstance(b, Opnd) and a.memory == b.memory == "psum":
        out.append(Finding("psum-inputs", "tensor_tensor_scan: data0 and data1 are both in PSUM"))
    init = ops["initial"] if "initial" in ops else attrs.get("initial")
    if isinstance(init, Opnd):
        if init.free not in (None, 1):
            out.append(Finding("scan-operator", f"tensor_tensor_scan initial has {init.free} elements per "
                               "partition; must be [P, 1]"))
    elif init is None or isinstance(init, (bool, np.bool_)) or not _is_num(init):
        out.append(Finding("scan-operator", f"tensor_tensor_scan initial={init!r} is neither a number nor "
                           "a [P, 1] tile"))


def _c_nc_n_gather(out, eng, t, ops, attrs) -> None:
    for role in ("dst", "data", "indices"):
        _mem(out, "nc_n_gather", ops, role, ("sbuf",))
    d, x, i = ops.get("dst"), ops.get("data"), ops.get("indices")
    if isinstance(i, Opnd) and i.dtype is not None and i.dtype != "uint32":
        out.append(Finding("gather-dtype", f"nc_n_gather indices are {i.dtype}; must be uint32"))
    if isinstance(d, Opnd) and isinstance(x, Opnd) and d.dtype and x.dtype and d.dtype != x.dtype:
        out.append(Finding("gather-dtype", f"nc_n_gather: dst is {d.dtype}, data is {x.dtype}; must match"))
    if isinstance(d, Opnd) and isinstance(i, Opnd) and None not in (d.free, i.free) and d.free != i.free:
        out.append(Finding("gather-dtype", f"nc_n_gather: dst holds {d.free} elements per partition, "
                           f"indices {i.free}"))


def _c_dma_copy(out, eng, t, ops, attrs) -> None:
    for role in ("dst", "src"):
        _mem(out, "dma_copy", ops, role, ("hbm", "sbuf"), " (DMA cannot access PSUM)")
    d, s = ops.get("dst"), ops.get("src")
    if isinstance(d, Opnd) and isinstance(s, Opnd) and None not in (d.partitions, d.free, s.partitions, s.free):
        if d.partitions * d.free != s.partitions * s.free:
            out.append(Finding("dma-elements", f"dma_copy moves {s.partitions * s.free} elements into "
                               f"{d.partitions * d.free}"))


_CHECKS = {
    "tensor_tensor": _c_tensor_tensor, "tensor_scalar": _c_tensor_scalar, "tensor_reduce": _c_tensor_reduce,
    "activation": _c_activation, "nc_transpose": _c_nc_transpose, "nc_matmul": _c_nc_matmul,
    "tensor_copy": _c_tensor_copy, "tensor_copy_predicated": _c_tensor_copy_predicated,
    "memset": _c_memset, "iota": _c_iota, "affine_select": _c_affine_select, "dma_copy": _c_dma_copy,
    "tensor_tensor_scan": _c_tensor_tensor_scan, "nc_n_gather": _c_nc_n_gather,
}


def accumulate_onto_nonmatmul_refused(target: Target | str | None) -> bool:
    """Whether ``matmul-accumulate-nonmatmul`` applies on the target (NeuronCore-v2/v3 only)."""
    return MATMUL_ACCUMULATE_NONMATMUL_REFUSED[_target(target).nc_version]


def reduce_axis_finding(axis: Any, rank: int) -> Finding | None:
    """``reduce-axis``: tensor_reduce reduces the last contiguous free axes (never axis 0)."""
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    try:
        ax = sorted(int(a) % rank for a in axes)
    except (TypeError, ValueError):
        return Finding("reduce-axis", f"tensor_reduce axis={axis!r} is not a list of ints")
    if not ax or 0 in ax:
        return Finding("reduce-axis", f"tensor_reduce axis {list(axes)} includes the partition axis 0; "
                       "reduce across partitions with a transpose or a matmul")
    if ax != list(range(ax[0], rank)):
        return Finding("reduce-axis", f"tensor_reduce axis {list(axes)} must be contiguous free axes ending "
                       f"at the last axis {rank - 1}")
    return None


def check_indirect(base_shape: tuple[int, ...] | None, base_memory: str, pattern: list | tuple,
                   indirect_dim: int, offsets: Opnd | None) -> list[Finding]:
    """Rules of ``tensor.ap(pattern=, vector_offset=, indirect_dim=)``: HBM base, dim 0, ``[P, 1]``
    SBUF offsets, and a leading pattern stride equal to the row stride the hardware derives from the
    base tensor's shape (the pattern's own stride is ignored)."""
    out: list[Finding] = []
    if base_memory != "hbm":
        out.append(Finding("indirect-dma", f"vector_offset indexes a {base_memory.upper()} tensor; "
                           "the indexed tensor must be in HBM"))
    if indirect_dim != 0:
        out.append(Finding("indirect-dma", f"indirect_dim={indirect_dim}; vector_offset supports only 0"))
    if offsets is not None:
        if offsets.memory != "sbuf":
            out.append(Finding("indirect-dma", f"vector_offset is in {offsets.memory.upper()}; must be SBUF"))
        if offsets.free not in (None, 1):
            out.append(Finding("indirect-dma", f"vector_offset has {offsets.free} elements per partition; "
                               "must be [P, 1]"))
    if base_shape is not None and pattern:
        row = 1
        for n in base_shape[1:]:
            row *= int(n)
        try:
            stride = int(pattern[0][0])
        except (TypeError, ValueError, IndexError):
            stride = None
        if stride is not None and stride != row:
            out.append(Finding("indirect-dma-row-stride", f"indirect row stride {stride} in the pattern, but "
                               f"the base tensor of shape {list(base_shape)} gives {row}: the hardware uses "
                               f"{row} and would read other rows"))
    return out


def activation_range_finding(op: Any, values: np.ndarray) -> Finding | None:
    """The ``activation-range`` finding when some (non-NaN) input lies outside the function's range."""
    f = act_func(op)
    if f is None or f not in ACT_RANGE or values.size == 0:
        return None
    lo, hi, magnitude = ACT_RANGE[f]
    # compared in float32, the engine's precision: float32(pi) is a valid sin input
    v = np.asarray(values, dtype=np.float32)
    x = np.abs(v) if magnitude else v
    bad = ~np.isnan(x) & ((x < np.float32(lo)) | (x > np.float32(hi)))
    if not bad.any():
        return None
    first = float(v[bad].flat[0])
    rng = f"±[{lo:.4g}, {hi:.4g}]" if magnitude else f"[{lo:.4g}, {hi:.4g}]"
    return Finding("activation-range", f"activation op={f}: {int(bad.sum())} input value(s) outside the "
                   f"valid range {rng}, e.g. {first!r}")


def int_compare_finding(op: Any, engine: str, arrays: list[tuple[str, Any]]) -> Finding | None:
    """``int-fp32-exact``: a comparison computed in float32 whose answer may differ from the integer one.

    Rounding to float32 is monotonic and every integer below 2^24 is exact, so comparing an integer
    of any size with a value below 2^24 in magnitude (``x < 0``, ``x == 5``) gives the integer
    answer; only element pairs whose two sides both reach 2^24 can compare wrongly."""
    a = alu_op(op)
    if a not in COMPARE or len(arrays) < 2:
        return None
    vals = [(role, np.asarray(arr)) for role, arr in arrays]
    if not any(v.dtype.kind in "iu" for _, v in vals):
        return None
    try:
        wide = np.broadcast_arrays(*(np.abs(v.astype(np.float64)) >= FP32_EXACT_INT for _, v in vals))
    except ValueError:
        return None
    both = np.logical_and.reduce(wide)
    if not both.any():
        return None
    i = tuple(int(x[0]) for x in np.nonzero(both))
    seen = ", ".join(f"{role} = {np.broadcast_to(v, both.shape)[i]}" for role, v in vals)
    return Finding("int-fp32-exact", f"{a} on the {engine} engine compares in float32 integer operands that "
                   f"both reach 2^24 ({seen}): the answer may differ from the integer comparison")


_INT_RANGE = {"int32": (-(2 ** 31), 2 ** 31 - 1), "uint32": (0, 2 ** 32 - 1)}


def int_overflow_finding(op: Any, a: Any, b: Any, dst_dtype: str) -> Finding | None:
    """``int32-overflow``: GpSimd's native integer ``tensor_tensor`` (all int32/uint32 tiles) is
    documented exact for 32-bit values only; a result outside the destination's 32-bit range has
    no documented value (no wrap-around is promised), so it is refused. Products are judged in
    float64, exact near the 2**31 / 2**32 bounds."""
    name = name_of(op)
    if name not in ("add", "subtract", "multiply") or dst_dtype not in _INT_RANGE:
        return None
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    r = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply}[name](x, y)
    lo, hi = _INT_RANGE[dst_dtype]
    bad = (r < lo) | (r > hi)
    if not bad.any():
        return None
    i = tuple(int(k[0]) for k in np.nonzero(bad))
    u = int(np.broadcast_to(np.asarray(a), bad.shape)[i])
    v = int(np.broadcast_to(np.asarray(b), bad.shape)[i])
    exact = {"add": u + v, "subtract": u - v, "multiply": u * v}[name]
    return Finding("int32-overflow", f"tensor_tensor {name} on GpSimd integers: {int(bad.sum())} "
                   f"result(s) outside {dst_dtype}, e.g. {name}({u}, {v}) = {exact}; the NKI docs "
                   "promise exact results for 32-bit values only, not wrap-around")


def transpose_nonfinite_finding(engine: str, target: Target | str | None, values: Any) -> Finding | None:
    """``transpose-nonfinite-v2``: a TensorE transpose on NeuronCore-v2 of data holding NaN/Inf."""
    t = _target(target)
    v = np.asarray(values)
    if engine != "tensor" or t.nc_version != 2 or v.dtype.kind in "iub":
        return None
    bad = ~np.isfinite(v.astype(np.float32))
    if not bad.any():
        return None
    first = float(v[bad].flat[0])
    return Finding("transpose-nonfinite-v2", f"TensorE transpose on {t.name} (NeuronCore-v2) of "
                   f"{int(bad.sum())} NaN/Inf value(s), e.g. {first!r}: not bit-accurate there")


_INT_LIMITS = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767),
               "uint32": (0, 2 ** 32 - 1), "int32": (-(2 ** 31), 2 ** 31 - 1)}


def float_to_int_finding(values: Any, dst_dtype: str) -> Finding | None:
    """``float-int-conversion``: float values written to an integer destination that are NaN, +-Inf
    or outside its range (as real numbers, so that no rounding direction can leave it)."""
    v = np.asarray(values)
    if dst_dtype not in _INT_LIMITS or v.dtype.kind != "f" or v.size == 0:
        return None
    lo, hi = _INT_LIMITS[dst_dtype]
    x = v.astype(np.float64)
    bad = ~((x >= lo) & (x <= hi))  # NaN compares false
    if not bad.any():
        return None
    first = float(x[bad].flat[0])
    return Finding("float-int-conversion", f"{int(bad.sum())} float value(s) converted to {dst_dtype} are "
                   f"NaN, +-Inf or outside [{lo}, {hi}], e.g. {first!r}: the NKI docs do not say what the "
                   "hardware makes of them")
