"""Static timing model of a tile-IR ``Kernel`` on a Trainium NeuronCore.

Why static: the shapes we care about (a [4096, 8192] @ [8192, 8192] GEMM issues ~100k instructions
and DMAs) are far too big to simulate, and a kernel's loop bodies are almost always identical from
one iteration to the next. So the model summarises each statement list once and composes summaries:

* an ``Instr`` / ``Dma`` costs what instrs.py says (busy seconds per resource, latency);
* a statement list (loop body) is scheduled in program order: a statement starts when the tiles it
  needs are ready (RAW through tiles, WAR/WAW conservatively), engines run concurrently, and the
  list takes max(critical path, busiest resource) — the classic list-scheduling bound;
* an ``affine`` loop is software-pipelined: ``latency(body) + (E-1) * II`` where the initiation
  interval II is the busiest resource of one iteration, or ``latency / depth`` when only ``depth``
  iterations fit in PSUM or in SBUF (each in-flight iteration holds its PSUM banks, and in SBUF one
  operand's worth of each tile it allocates: NKIBench's mamba scan, whose iteration works on more
  than SBUF in whole [128, 7168] fp32 tiles, measures as its iterations run back to back);
* a ``sequential`` loop never overlaps iterations: ``E * latency(body)``.

Loop bodies whose sizes depend on the loop variable (ragged last tiles) are summarised twice, at the
first and the last iteration, and combined as (E-1) x first + last — exact for the usual shape where
only the last tile is ragged.

A compound statement (a whole loop) also records, per outside tile, how long after its start it first
needs that tile, so a loop of matmuls may start before the loads it only needs later have finished.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import sympy

from ..ir.nodes import DTYPE_BYTES, Alloc, Dma, HBMAccess, Instr, Kernel, Loop, Stmt, Tile, TileRegion
from ..target import Target
from .instrs import Cost, dma_cost, instr_cost, make_evaluator

COMPUTE_ENGINES = ("tensor", "vector", "scalar", "gpsimd")
ENGINES = COMPUTE_ENGINES + ("dma",)


@dataclass
class Summary:
    """What a statement (list) costs when started at t=0 with every outside tile ready."""

    latency: float = 0.0
    busy: dict[str, float] = field(default_factory=dict)
    #: outside tile -> seconds after start when it is first touched
    need: dict[Tile, float] = field(default_factory=dict)
    reads: set[Tile] = field(default_factory=set)
    writes: set[Tile] = field(default_factory=set)
    flops: float = 0.0
    matmul_flops: float = 0.0
    hbm_bytes: float = 0.0
    dma_bytes: float = 0.0
    dma_small_bytes: float = 0.0
    counts: dict[str, float] = field(default_factory=dict)
    psum_bytes: int = 0  # PSUM bytes per partition allocated inside (one iteration)
    sbuf_bytes: int = 0  # SBUF bytes per partition allocated inside (one iteration)
    hbm_write_bytes: float = 0.0
    #: ``Target.hbm_rw_mix_penalty`` of the target being priced
    rw_penalty: float = 0.0

    def add_totals(self, other: "Summary", times: float = 1.0) -> None:
        for r, b in other.busy.items():
            self.busy[r] = self.busy.get(r, 0.0) + b * times
        for k, c in other.counts.items():
            self.counts[k] = self.counts.get(k, 0.0) + c * times
        self.flops += other.flops * times
        self.matmul_flops += other.matmul_flops * times
        self.hbm_bytes += other.hbm_bytes * times
        self.hbm_write_bytes += other.hbm_write_bytes * times
        self.dma_bytes += other.dma_bytes * times
        self.dma_small_bytes += other.dma_small_bytes * times

    @property
    def dma_busy(self) -> float:
        """The DMA pool's busy time, stretched by the HBM read/write mix: traffic that both reads
        and writes HBM moves fewer bytes per second than one-way traffic (``Target.hbm_rw_mix_penalty``)."""
        busy = self.busy.get("dma", 0.0)
        if busy <= 0.0 or self.hbm_bytes <= 0.0:
            return busy
        w = self.hbm_write_bytes / self.hbm_bytes
        return busy / (1.0 - self.rw_penalty * min(w, 1.0 - w))

    @property
    def bottleneck(self) -> float:
        return max([b for r, b in self.busy.items() if r != "dma"] + [self.dma_busy], default=0.0)


#: instruction operands that are written, not read (``activation(reduce_res=...)``)
_OUTPUT_OPERANDS = frozenset({"reduce_res"})


def _operands(s: Instr | Dma) -> tuple[set[Tile], set[Tile]]:
    """(tiles read, tiles written) by one instruction or DMA."""
    reads: set[Tile] = set()
    writes: set[Tile] = set()
    if isinstance(s, Dma):
        for side, is_dst in ((s.src, False), (s.dst, True)):
            if isinstance(side, TileRegion):
                (writes if is_dst else reads).add(side.tile)
            elif isinstance(side, HBMAccess) and side.indirect is not None:
                reads.add(side.indirect.tile)
        return reads, writes
    writes.add(s.dst.tile)
    for name, v in s.srcs.items():
        if isinstance(v, TileRegion):
            (writes if name in _OUTPUT_OPERANDS else reads).add(v.tile)
    if s.op == "nc_matmul" and s.attrs.get("accumulate") not in (None, False, 0):
        reads.add(s.dst.tile)  # += into PSUM
    return reads, writes


def _free_symbols(stmts: list[Stmt]) -> set[sympy.Symbol]:
    """Symbols that size anything inside (offsets do not change cost, sizes and strides do)."""
    syms: set[sympy.Symbol] = set()

    def add(x) -> None:
        if isinstance(x, sympy.Basic):
            syms.update(x.free_symbols)

    def region(r) -> None:
        if isinstance(r, TileRegion):
            for s in r.sizes:
                add(s)
        elif isinstance(r, HBMAccess):
            for st, c in r.pattern:
                add(st)
                add(c)

    for s in stmts:
        if isinstance(s, Loop):
            syms |= _free_symbols(s.body) - {s.var}
        elif isinstance(s, Dma):
            region(s.src)
            region(s.dst)
        elif isinstance(s, Instr):
            region(s.dst)
            for v in s.srcs.values():
                region(v)
    return syms


def _grains(stmts: list[Stmt]) -> dict[Tile, int]:
    """Per SBUF tile, the most bytes per partition one instruction or DMA touches at once: the
    compiler recycles a multi-tile block piece by piece as its consumers finish, so what an in-flight
    iteration pins is one operand's worth of each tile, not the declared block."""
    out: dict[Tile, int] = {}

    def note(r) -> None:
        if isinstance(r, TileRegion) and r.tile.memory == "sbuf":
            n = DTYPE_BYTES[r.tile.dtype]
            for size, full in zip(r.sizes[1:], r.tile.shape[1:]):
                n *= int(size) if isinstance(size, int) or getattr(size, "is_number", False) else full
            out[r.tile] = max(out.get(r.tile, 0), n)

    for s in stmts:
        if isinstance(s, Loop):
            for t, n in _grains(s.body).items():
                out[t] = max(out.get(t, 0), n)
        elif isinstance(s, Dma):
            note(s.src)
            note(s.dst)
        elif isinstance(s, Instr):
            note(s.dst)
            for v in s.srcs.values():
                note(v)
    return out


class _Walker:
    def __init__(self, target: Target, grains: dict[Tile, int] | None = None) -> None:
        self.target = target
        self.grains = grains or {}
        self._queues: dict[int, str] = {}
        self._deps: dict[int, set[sympy.Symbol]] = {}

    def queue(self, dma: Dma) -> str:
        return self._queues.setdefault(id(dma), f"dmaq{len(self._queues)}")

    # -- leaves --------------------------------------------------------------------------------
    def leaf(self, s: Instr | Dma, env: dict) -> Summary:
        ev = make_evaluator(env)
        c: Cost = dma_cost(s, self.target, ev, self.queue(s)) if isinstance(s, Dma) \
            else instr_cost(s, self.target, ev)
        reads, writes = _operands(s)
        key = "dma" if isinstance(s, Dma) else s.engine
        return Summary(latency=c.latency, busy=dict(c.busy), need={t: 0.0 for t in reads | writes},
                       hbm_write_bytes=c.hbm_write_bytes, rw_penalty=self.target.hbm_rw_mix_penalty,
                       reads=reads, writes=writes, flops=c.flops, matmul_flops=c.matmul_flops,
                       hbm_bytes=c.hbm_bytes, dma_bytes=c.dma_bytes, dma_small_bytes=c.dma_small_bytes,
                       counts={key: 1.0})

    # -- statement lists -----------------------------------------------------------------------
    def body(self, stmts: list[Stmt], env: dict) -> Summary:
        out = Summary(rw_penalty=self.target.hbm_rw_mix_penalty)
        local: set[Tile] = set()
        write_done: dict[Tile, float] = {}
        read_done: dict[Tile, float] = {}
        finish = 0.0
        for s in stmts:
            if isinstance(s, Alloc):
                local.add(s.tile)
                write_done.pop(s.tile, None)
                read_done.pop(s.tile, None)
                if s.tile.memory == "psum":  # PSUM is handed out in whole banks
                    bank = self.target.psum_bank_bytes
                    out.psum_bytes += -(-s.tile.bytes_per_partition // bank) * bank
                else:
                    out.sbuf_bytes += min(s.tile.bytes_per_partition,
                                          self.grains.get(s.tile, s.tile.bytes_per_partition))
                continue
            sm = self.loop(s, env) if isinstance(s, Loop) else self.leaf(s, env)
            start = 0.0
            for t in sm.reads:
                if t in write_done:  # RAW: start so that t is ready when first needed
                    start = max(start, write_done[t] - sm.need.get(t, 0.0))
            for t in sm.writes:      # WAR / WAW: conservatively before starting at all
                start = max(start, write_done.get(t, 0.0), read_done.get(t, 0.0))
            end = start + sm.latency
            finish = max(finish, end)
            for t in sm.writes:
                write_done[t] = end
            for t in sm.reads:
                read_done[t] = max(read_done.get(t, 0.0), end)
            for t, n in sm.need.items():
                if t not in local:
                    out.need[t] = min(out.need.get(t, start + n), start + n)
            out.reads |= sm.reads - local
            out.writes |= sm.writes - local
            out.add_totals(sm)
            out.psum_bytes += sm.psum_bytes
            out.sbuf_bytes += sm.sbuf_bytes
        out.latency = max(finish, out.bottleneck)
        return out

    # -- loops -----------------------------------------------------------------------------------
    def loop(self, loop: Loop, env: dict) -> Summary:
        E = loop.extent
        if E <= 0:
            return Summary(rw_penalty=self.target.hbm_rw_mix_penalty)
        deps = self._deps.get(id(loop))
        if deps is None:
            deps = self._deps[id(loop)] = _free_symbols(loop.body)
        first = self.body(loop.body, {**env, loop.var: 0})
        last = self.body(loop.body, {**env, loop.var: E - 1}) if (E > 1 and loop.var in deps) else first
        out = Summary(need=dict(first.need), reads=set(first.reads) | last.reads,
                      writes=set(first.writes) | last.writes, psum_bytes=first.psum_bytes,
                      sbuf_bytes=first.sbuf_bytes,
                      rw_penalty=self.target.hbm_rw_mix_penalty)
        out.add_totals(first, E - 1)
        out.add_totals(last, 1)
        if loop.kind == "sequential" or E == 1:
            out.latency = first.latency * (E - 1) + last.latency
        else:
            ii = first.bottleneck
            if first.psum_bytes:
                depth = max(1, self.target.psum_bytes_per_partition // max(1, first.psum_bytes))
                ii = max(ii, first.latency / depth)
            if first.sbuf_bytes:  # in-flight iterations each hold their SBUF tiles too
                depth = max(1, self.target.sbuf_bytes_per_partition // first.sbuf_bytes)
                ii = max(ii, first.latency / depth)
            out.latency = max(first.latency, last.latency) + (E - 1) * ii
        out.latency = max(out.latency, out.bottleneck)
        return out


# --- results -----------------------------------------------------------------------------------
@dataclass
class KernelCost:
    """The model's verdict on one kernel."""

    name: str
    target: str
    seconds: float
    bound: str                       # "compute", "memory" or "overhead"
    utilization: dict[str, float]    # engine -> busy fraction of ``seconds`` (<= 1)
    busy_s: dict[str, float]         # engine -> busy seconds
    flops: float
    matmul_flops: float
    hbm_bytes: float
    counts: dict[str, int]           # engine -> instructions (dma: transfers)
    peak_flops: float
    dma_bytes: float = 0.0           # bytes moved by DMA (either side's dtype, the larger)
    dma_small_bytes: float = 0.0     # ... of which in descriptors < 2 KiB per partition
    #: the FX nodes the kernel computes (``Kernel.provenance``) and its minimum HBM bytes (every
    #: parameter read once, every output written once)
    provenance: list[str] = field(default_factory=list)
    min_hbm_bytes: float = 0.0

    @property
    def small_dma_share(self) -> float:
        """Share of the DMA bytes moved in descriptors under 2 KiB per partition."""
        return self.dma_small_bytes / self.dma_bytes if self.dma_bytes > 0 else 0.0

    @property
    def mfu(self) -> float:
        """Matmul FLOPs over the TensorE peak in the modelled time (the tutorial's "HFU")."""
        return self.matmul_flops / (self.seconds * self.peak_flops) if self.seconds > 0 else 0.0


@dataclass
class ProgramCost:
    kernels: list[KernelCost]
    seconds: float
    flops: float
    matmul_flops: float
    hbm_bytes: float
    #: the kernels that make up most of the time, slowest first
    critical: list[KernelCost]

    @property
    def dma_bytes(self) -> float:
        return sum(k.dma_bytes for k in self.kernels)

    @property
    def small_dma_share(self) -> float:
        """Share of all DMA bytes moved in descriptors under 2 KiB per partition."""
        total = self.dma_bytes
        return sum(k.dma_small_bytes for k in self.kernels) / total if total > 0 else 0.0


def _bound(seconds: float, busy: dict[str, float], queue: float) -> str:
    """What limits the kernel: ``compute`` (an engine), ``memory`` (moving bytes through the DMA
    engines) or ``overhead`` (fixed per-transfer DMA costs of one queue, or dependency latency: no
    resource is busy for even half of the time)."""
    compute = max((busy.get(e, 0.0) for e in COMPUTE_ENGINES), default=0.0)
    memory = busy.get("dma", 0.0)
    top = max(compute, memory, queue)
    if top < 0.5 * seconds or (queue > compute and queue > memory):
        return "overhead"
    return "compute" if compute >= memory else "memory"


def estimate_kernel(kernel: Kernel, target: Target) -> KernelCost:
    """Estimated time and resource use of one kernel on one NeuronCore of ``target``."""
    sm = _Walker(target, _grains(kernel.body)).body(kernel.body, {})
    seconds = sm.latency
    busy = {e: sm.busy.get(e, 0.0) for e in ENGINES}
    busy["dma"] = sm.dma_busy
    util = {e: (min(1.0, b / seconds) if seconds > 0 else 0.0) for e, b in busy.items()}
    counts = {e: int(round(sm.counts.get(e, 0.0))) for e in ENGINES}
    queue = max((b for r, b in sm.busy.items() if r.startswith("dmaq")), default=0.0)
    return KernelCost(name=kernel.name, target=target.name, seconds=seconds,
                      bound=_bound(seconds, busy, queue), utilization=util, busy_s=busy, flops=sm.flops,
                      matmul_flops=sm.matmul_flops, hbm_bytes=sm.hbm_bytes, counts=counts,
                      peak_flops=target.peak_bf16_flops, dma_bytes=sm.dma_bytes,
                      dma_small_bytes=sm.dma_small_bytes, provenance=list(kernel.provenance),
                      min_hbm_bytes=float(sum(t.numel * DTYPE_BYTES[t.dtype]
                                              for t in list(kernel.params) + list(kernel.outputs))))


def estimate_program(kernels: Iterable[Kernel], target: Target, critical_share: float = 0.8,
                     max_critical: int = 5) -> ProgramCost:
    """Kernels run one after another on one NeuronCore: the program time is their sum. The critical
    kernels are the slowest ones that together make up ``critical_share`` of it."""
    if hasattr(kernels, "kernels"):  # a host Program
        kernels = kernels.kernels  # type: ignore[attr-defined]
    costs = [estimate_kernel(k, target) for k in kernels]
    total = sum(c.seconds for c in costs)
    critical: list[KernelCost] = []
    acc = 0.0
    for c in sorted(costs, key=lambda c: -c.seconds):
        if acc >= critical_share * total or len(critical) >= max_critical:
            break
        critical.append(c)
        acc += c.seconds
    return ProgramCost(kernels=costs, seconds=total, flops=sum(c.flops for c in costs),
                       matmul_flops=sum(c.matmul_flops for c in costs),
                       hbm_bytes=sum(c.hbm_bytes for c in costs), critical=critical)
