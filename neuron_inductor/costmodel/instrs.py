"""Per-instruction costs: what one ``Instr`` or ``Dma`` occupies and how long until its result is ready.

Every number here is a documented hardware figure (the ``nki.isa`` cost notes and the
Trainium architecture pages of the AWS Neuron documentation),
never a value fitted to a particular kernel. Rates and bandwidths come from the ``Target``; the
micro-architectural constants below are the same on NeuronCore-v2 and -v3 per the public docs.

A cost is split in two because engines run concurrently:
* ``busy`` — seconds each *resource* is occupied (an engine, the shared DMA engine pool, or the
  in-order DMA queue of one ``Dma`` statement); throughput bounds come from summing these;
* ``latency`` — seconds from issue until the result can be consumed; critical paths come from these.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import sympy

from ..ir.nodes import DTYPE_BYTES, Dma, HBMAccess, Instr, TileRegion
from ..spec import AluOp
from ..target import Target

# --- documented constants --------------------------------------------------------------------------
#: minimum initiation interval of an engine instruction, cycles (docs/hardware.md, "Engines and their rates")
MIN_II = 64
#: fixed SBUF/PSUM access overhead of one Vector/Scalar/GpSimd instruction, cycles (§5.3, [A1]
#: "~60 cycles per tensor access"). Operands of one instruction stream in parallel, so we charge it
#: once per instruction, not once per operand.
ACCESS_OVERHEAD = 60
#: GpSimd instruction start cost, cycles (§4.1 iota/affine_select "150 + N", §5.3 "GpSimd start ~150")
GPSIMD_START = 150
#: fp32 (and fp32-paired) matmuls run at a quarter of the bf16 rate (§4.1 nc_matmul, §5.3)
FP32_MATMUL_FACTOR = 4
#: LoadStationary is up to 4x faster than a matmul of the same free size and runs in the
#: background of the previous matmul (§5.3, [A1]); it only shows when it is longer than the matmul
LOAD_STATIONARY_SPEEDUP = 4
#: DMA descriptor overhead, expressed as the bytes an engine could have moved in the same time.
#: Derived from the §5.4 efficiency rule: with 1 KiB of overhead per contiguous chunk, a 256 B chunk
#: runs at 20% ("<256 B per partition is overhead-bound"), 2 KiB at 67% ("≥2 KiB recommended
#: minimum"), 4 KiB at 80% and 64 KiB at 98% ("≥4 KiB saturates").
DMA_DESCRIPTOR_OVERHEAD_BYTES = 192
#: contiguous bytes per partition below which a descriptor is "small" (§5.4: ≥2 KiB recommended)
SMALL_DESCRIPTOR_BYTES = 2048

#: ALU ops that VectorE runs at one element per cycle on all-bf16 contiguous SBUF inputs (§4.1)
_FAST_BF16_OPS = frozenset({AluOp.add, AluOp.subtract, AluOp.multiply})
#: reductions VectorE runs at two elements per cycle on bf16 in/out (§4.1 tensor_reduce)
_HALF_REDUCE_OPS = frozenset({AluOp.add, AluOp.maximum})

Evaluator = Callable[[object], int]


@dataclass
class Cost:
    """The cost of one statement execution."""

    latency: float
    busy: dict[str, float] = field(default_factory=dict)
    flops: float = 0.0
    matmul_flops: float = 0.0
    hbm_bytes: float = 0.0
    #: of ``hbm_bytes``, the bytes written to HBM (the read/write mix sets the HBM efficiency)
    hbm_write_bytes: float = 0.0
    #: bytes a DMA moves, and the part of them moved in descriptors under ``SMALL_DESCRIPTOR_BYTES``
    dma_bytes: float = 0.0
    dma_small_bytes: float = 0.0


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


def _region_sizes(r: TileRegion, ev: Evaluator) -> tuple[int, ...]:
    return tuple(max(0, ev(s)) for s in r.sizes)


def _free(r: TileRegion, ev: Evaluator) -> tuple[int, int]:
    """(partitions, free elements per partition) of a region."""
    sizes = _region_sizes(r, ev)
    return sizes[0], _prod(sizes[1:])


def _tiles(instr: Instr) -> list[TileRegion]:
    return [v for v in instr.srcs.values() if isinstance(v, TileRegion)]


def _clock(target: Target, engine: str) -> float:
    return {"tensor": target.tensor_clock_hz, "vector": target.vector_clock_hz,
            "scalar": target.scalar_clock_hz, "gpsimd": target.gpsimd_clock_hz}[engine]


def _vector_speed(instr: Instr, target: Target | None, ev: Evaluator) -> float:
    """VectorE elements per lane per cycle: the §4.1 cycle counts assume one (128 per cycle, as
    NeuronCore-v2); trn2 processes 256 per cycle, and 512 in the bf16 perf mode of SBUF-contiguous
    tensor_copy / tensor_scalar (docs/hardware.md, "Engines and their rates"). Rates come from the ``Target``."""
    if target is None or instr.engine != "vector":
        return 1.0
    speed = target.vector_elems_per_cycle / target.partitions
    tiles = _tiles(instr) + [instr.dst]
    if instr.op in ("tensor_copy", "tensor_scalar") \
            and all(t.dtype in ("bfloat16", "float16") and t.memory == "sbuf" for t in tiles) \
            and all(_sbuf_run(t, ev) == _free(t, ev)[1] for t in tiles):
        speed = target.vector_bf16_perf_elems_per_cycle / target.partitions
    return max(1.0, speed)


def instr_cycles(instr: Instr, ev: Evaluator, target: Target | None = None) -> tuple[int, int, int]:
    """(engine cycles, elements processed, matmul MACs) of one instruction, per the §4.1 cost column
    (VectorE element terms scaled by the target's documented rate, see ``_vector_speed``)."""
    op = instr.op
    parts, n_dst = _free(instr.dst, ev)
    srcs = _tiles(instr)
    n_src = max([_free(s, ev)[1] for s in srcs] or [n_dst])
    n = max(n_dst, n_src)
    # fixed costs (MIN_II, access overhead) stay; only the element term follows the engine's rate
    nv = n if op == "nc_transpose" else math.ceil(n / _vector_speed(instr, target, ev))
    if op == "nc_matmul" and isinstance(instr.srcs.get("stationary"), TileRegion) \
            and isinstance(instr.srcs.get("moving"), TileRegion):
        stat, mov = instr.srcs["stationary"], instr.srcs["moving"]
        k, m = _free(stat, ev)
        _, nmov = _free(mov, ev)
        fp32 = "float32" in (stat.dtype, mov.dtype)
        factor = FP32_MATMUL_FACTOR if fp32 else 1
        # initiation interval max(min(64, N_stat), N_moving) per 128-row pass (K <= 128: one pass),
        # plus the measured fixed cost of each pass (``Target.tensor_pass_overhead_*``)
        over = 0 if target is None else (target.tensor_pass_overhead_fp32 if fp32
                                         else target.tensor_pass_overhead_bf16)
        mm = (max(min(MIN_II, m), nmov, MIN_II) + over) * factor
        load_stationary = math.ceil(m * factor / LOAD_STATIONARY_SPEEDUP)
        return max(mm, load_stationary), 0, k * m * nmov
    if op == "nc_transpose":
        data = instr.srcs.get("data")
        p, f = _free(data, ev) if isinstance(data, TileRegion) else (parts, n)
        if instr.engine == "tensor":
            return max(p, min(MIN_II, f)), 0, 0
        return max(MIN_II, f) + ACCESS_OVERHEAD, p * f, 0
    elems = parts * n
    if instr.engine == "gpsimd":
        # every GpSimd instruction pays its start cost (§4.1 iota/affine_select, §5.3)
        return GPSIMD_START + n, elems, 0
    if op == "activation":
        extra = MIN_II if instr.attrs.get("reduce_op") or instr.srcs.get("reduce_res") is not None else 0
        return max(MIN_II, nv) + extra + ACCESS_OVERHEAD, elems, 0
    if op == "tensor_tensor":
        ins = srcs[:2] or [instr.dst]
        mems = {t.memory for t in ins}
        all_bf16 = all(t.dtype == "bfloat16" for t in ins + [instr.dst]) and mems == {"sbuf"}
        one_pass = mems == {"sbuf", "psum"} or (all_bf16 and instr.attrs.get("op") in _FAST_BF16_OPS)
        cyc = nv if one_pass else 2 * nv
        return max(MIN_II, cyc) + ACCESS_OVERHEAD, elems, 0
    if op == "tensor_reduce":
        data = instr.srcs.get("data", instr.dst)
        half = (getattr(data, "dtype", None) == instr.dst.dtype == "bfloat16"
                and instr.attrs.get("op") in _HALF_REDUCE_OPS)
        return (nv // 2 if half else nv) + ACCESS_OVERHEAD, elems, 0
    if op == "tensor_tensor_scan":  # "max(MIN_II, 2N) Vector Engine cycles" (SDK 2.26 docstring)
        return max(MIN_II, 2 * nv) + ACCESS_OVERHEAD, elems, 0
    if op == "tensor_copy_predicated":
        mems = {instr.dst.memory} | {s.memory for s in srcs}
        cyc = nv if mems == {"sbuf", "psum"} else 2 * nv
        return cyc + ACCESS_OVERHEAD, elems, 0
    if op == "memset":
        zero_half = instr.dst.dtype in ("bfloat16", "float16") and instr.srcs.get("value", instr.attrs.get("value")) in (0, 0.0)
        return max(MIN_II, nv // 2 if zero_half else nv) + ACCESS_OVERHEAD, elems, 0
    # tensor_scalar, tensor_copy and the rest: max(MIN_II, N)
    return max(MIN_II, nv) + ACCESS_OVERHEAD, elems, 0


def instr_cost(instr: Instr, target: Target, ev: Evaluator) -> Cost:
    cycles, elems, macs = instr_cycles(instr, ev, target)
    seconds = cycles / _clock(target, instr.engine)
    return Cost(latency=seconds, busy={instr.engine: seconds},
                flops=2.0 * macs + elems, matmul_flops=2.0 * macs)


# --- DMA -----------------------------------------------------------------------------------------
def _hbm_run(acc: HBMAccess, ev: Evaluator) -> int:
    """Elements per contiguous chunk of one partition's part of an HBM access pattern.
    Innermost stride != 1 (or a broadcast / gather per element) means one descriptor per element."""
    if acc.indirect is not None and len(acc.pattern) == 1:
        return 1
    run = 1
    for stride, count in reversed(acc.pattern[1:]):
        s, c = ev(stride), ev(count)
        if c == 1:
            continue
        if s == run:
            run *= c
        else:
            break
    return run


def _sbuf_run(r: TileRegion, ev: Evaluator) -> int:
    """Elements per contiguous chunk within one partition of a tile region."""
    sizes = _region_sizes(r, ev)
    run = 1
    for size, full in zip(reversed(sizes[1:]), reversed(r.tile.shape[1:])):
        run *= size
        if size != full:
            break
    return run


def dma_cost(dma: Dma, target: Target, ev: Evaluator, queue: str) -> Cost:
    """A DMA transfer split over the engines serving its partitions (§5.4).

    * engines used: each engine serves ``partitions / dma_engines`` SBUF partitions (8 of 128);
    * data time: bytes / (engines used x per-engine bandwidth), inflated by the descriptor overhead of
      each contiguous chunk (the ≥2 KiB-per-partition rule), never faster than the HBM bandwidth of one
      NeuronCore;
    * the fixed ~1.3 us per transfer (§5.3 "DMA fixed overhead") is latency, and it bounds the rate of
      the transfer's own queue: queues are in order (§5.4), and we give each ``Dma`` statement its own
      queue, so one statement issues at most one transfer per fixed cost while its data moves.
    """
    sides = (dma.src, dma.dst)
    hbm_sides = [x for x in sides if isinstance(x, HBMAccess)]
    tile_sides = [x for x in sides if isinstance(x, TileRegion)]
    # HBM<->SBUF is the contract; HBM->HBM or SBUF->SBUF copies are costed the same way
    first = hbm_sides[0] if hbm_sides else tile_sides[0]
    numel = _prod(max(0, ev(c)) for c in (first.sizes))
    nbytes = sum(numel * DTYPE_BYTES[h.dtype] for h in hbm_sides)
    moved = max(numel * DTYPE_BYTES[x.dtype] for x in sides)
    parts = max(1, ev(first.sizes[0]))
    per_engine_parts = max(1, target.partitions // target.dma_engines)
    engines = min(target.dma_engines, math.ceil(parts / per_engine_parts))
    elem = max(DTYPE_BYTES[x.dtype] for x in sides)
    per_partition = moved / parts
    chunk = min([_hbm_run(h, ev) for h in hbm_sides] + [_sbuf_run(t, ev) for t in tile_sides]) * elem
    chunk = max(elem, min(chunk, per_partition)) if moved else elem
    efficiency = chunk / (chunk + DMA_DESCRIPTOR_OVERHEAD_BYTES)
    data = moved / (engines * target.dma_engine_bytes_per_s * efficiency) if moved else 0.0
    data = max(data, nbytes / target.hbm_bytes_per_s)
    pool = data * engines / target.dma_engines
    return Cost(latency=target.dma_fixed_s + data,
                busy={"dma": pool, queue: max(target.dma_fixed_s, data)},
                hbm_bytes=float(nbytes), dma_bytes=float(moved),
                hbm_write_bytes=float(numel * DTYPE_BYTES[dma.dst.dtype]) if isinstance(dma.dst, HBMAccess) else 0.0,
                dma_small_bytes=float(moved) if chunk < SMALL_DESCRIPTOR_BYTES else 0.0)


def make_evaluator(env: dict[sympy.Symbol, int]) -> Evaluator:
    """Evaluate a (possibly sympy) size at fixed loop-variable values; sizes never go negative.
    ``xreplace`` (a plain substitution of symbols by integers, which sympy evaluates as it rebuilds)
    rather than ``subs``: the same value, several times faster, and this runs for every operand of
    every statement the model prices at compile time."""
    def ev(x) -> int:
        if isinstance(x, (int, bool)):
            return int(x)
        if isinstance(x, float):
            return int(x)
        v = sympy.sympify(sympy.sympify(x).xreplace(env))
        if not v.is_number:
            # a variable we do not know (should not happen inside a well-formed kernel): assume 0
            v = v.xreplace({s: 0 for s in v.free_symbols})
        return int(v)
    return ev
