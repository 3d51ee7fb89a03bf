"""Static checks of tile IR against a ``Target``.

Runs after lowering and after every IR pass, so a bad kernel is refused with a message naming the
kernel, the statement and the rule, long before the simulator or the hardware compiler would fail on
it (or silently produce garbage). Each rule has a short id (``IRVerificationError.rule``) that tests
and logs can match on.
"""
from __future__ import annotations

import functools
from typing import Any, Iterable

import numpy as np
import sympy

from ..spec import Opnd, check_indirect, check_instr, reduce_axis_finding
from ..target import Target
from .exprs import ExprError, pyexpr
from .nodes import DTYPE_BYTES, MEMORIES, Alloc, Dma, HBMAccess, HBMTensor, Instr, Kernel, Loop, Stmt, Tile, TileRegion
from .printer import format_stmt
from .program import Collective, Empty, Fallback, KernelCall, Program, Ref, UserKernelCall, View

#: structural rules of the IR; instruction rules (engines, operators, dtypes, memories, shapes) are
#: those of the instruction specification, ``neuron_inductor.spec.RULES``
RULES = (
    "partition-limit", "tile-rank", "psum-bank-size", "psum-banks", "sbuf-capacity", "engine-memory",
    "dma-memory", "hbm-operand", "reduce-axis", "output-written", "readonly-param", "alloc-before-use",
    "loop-var-scope", "dma-shape", "region-bounds", "hbm-bounds", "unique-names", "unknown-hbm", "host-names",
)


class IRVerificationError(ValueError):
    """A kernel (or host program) breaks a hardware or structural rule."""

    def __init__(self, kernel: str, rule: str, detail: str, stmt: str = "",
                 findings: list[tuple[str, str, str]] | None = None) -> None:
        self.kernel, self.rule, self.detail, self.stmt = kernel, rule, detail, stmt
        #: every instruction-specification violation of the kernel: (rule, detail, statement)
        self.findings = findings or [(rule, detail, stmt)]
        at = f"\n    at: {stmt}" if stmt else ""
        super().__init__(f"kernel {kernel}: [{rule}] {detail}{at}")


#: largest loop-index grid the verifier enumerates to get exact ranges of index expressions
GRID_LIMIT = 1 << 20


def _bounds(e: Any, ranges: dict) -> tuple[int, int] | None:
    """Exact (min, max) of ``e`` over the loop ranges, or None when it cannot be computed cheaply.

    Exact, not interval arithmetic: ragged sizes such as ``min(128, 300 - 128*i)`` are correlated with
    the offsets they accompany, and only an exact range proves a violation without false alarms.
    """
    if isinstance(e, int):
        return (e, e)
    e = sympy.sympify(e)
    if e.is_Integer:
        return (int(e), int(e))
    try:
        text = pyexpr(e)
    except ExprError:
        return None
    return _grid_range(text, e.free_symbols, ranges)


@functools.lru_cache(maxsize=4096)
def _grid_range_cached(text: str, grid: tuple[tuple[str, int, int], ...]) -> tuple[int, int]:
    axes = [np.arange(lo, hi + 1, dtype=np.int64) for _, lo, hi in grid]
    mesh = np.meshgrid(*axes, indexing="ij") if axes else []
    env: dict[str, Any] = {name: g for (name, _, _), g in zip(grid, mesh)}
    env.update(min=lambda *a: functools.reduce(np.minimum, a), max=lambda *a: functools.reduce(np.maximum, a))
    vals = np.asarray(eval(text, {"__builtins__": {}}, env))  # noqa: S307 - our own printed int expression
    return (int(vals.min()), int(vals.max()))


def _grid_range(text: str, syms: Iterable[sympy.Symbol], ranges: dict) -> tuple[int, int] | None:
    """Evaluate the printed expression ``text`` on the whole grid of its loop variables."""
    syms = sorted(syms, key=str)
    if any(v not in ranges for v in syms):
        return None
    points = 1
    for v in syms:
        points *= ranges[v][1] - ranges[v][0] + 1
    if points > GRID_LIMIT:
        return None
    return _grid_range_cached(text, tuple((v.name, *ranges[v]) for v in syms))


def _is_int(e: Any) -> bool:
    return (isinstance(e, int) and not isinstance(e, bool)) or (isinstance(e, sympy.Basic) and e.is_Integer)


def _syms(e: Any) -> set:
    return set(e.free_symbols) if isinstance(e, sympy.Basic) else set()


class _KernelVerifier:
    def __init__(self, k: Kernel, target: Target) -> None:
        self.k, self.t = k, target
        self.written: set[int] = set()
        self.names: dict[str, object] = {}
        self.hbm = {id(h): h for h in list(k.params) + list(k.outputs)}
        #: instruction-specification findings, gathered over the whole kernel and raised together
        self.conformance: list[tuple[str, str, str]] = []

    def fail(self, rule: str, detail: str, stmt: Stmt | None = None, ranges: dict | None = None) -> None:
        text = format_stmt(stmt, ranges) if stmt is not None else ""
        raise IRVerificationError(self.k.name, rule, detail, text)

    # ------------------------------------------------------------------ entry
    def run(self) -> None:
        for h in list(self.k.params) + list(self.k.outputs):
            self.name(h.name, h, None)
        for o in self.k.outputs:
            if o.kind != "output":
                self.fail("unique-names", f"{o.name} is listed as an output but has kind {o.kind!r}")
        self.block(self.k.body, (), set(), {})
        if self.conformance:
            rule, detail, stmt = self.conformance[0]
            more = len(self.conformance) - 1
            raise IRVerificationError(self.k.name, rule, detail + (f" (+{more} more NKI conformance "
                                      "finding(s))" if more else ""), stmt, self.conformance)
        for h in self.k.returned:
            if id(h) not in self.written:
                self.fail("output-written", f"{h.kind} tensor {h.name} is never the destination of a DMA")
        self.capacity()

    def spec_findings(self, findings: list, stmt: Stmt, ranges: dict) -> None:
        if not findings:   # formatting a statement is most of the verifier's time: only on a finding
            return
        text = format_stmt(stmt, ranges)
        self.conformance += [(f.rule, f.cited(), text) for f in findings]

    def name(self, name: str, obj: object, stmt: Stmt | None) -> None:
        prev = self.names.setdefault(name, obj)
        # sibling loops may reuse a loop variable (equal symbols); anything else must be one object
        if prev is not obj and not (isinstance(prev, sympy.Symbol) and prev == obj):
            self.fail("unique-names", f"name {name!r} is used for two different tensors/tiles", stmt)

    # ------------------------------------------------------------------ walk
    def block(self, stmts: list[Stmt], loops: tuple[Loop, ...], visible: set[int], ranges: dict) -> None:
        visible = set(visible)  # tiles allocated in this body die with it
        for s in stmts:
            if isinstance(s, Loop):
                if any(l.var == s.var for l in loops):
                    self.fail("loop-var-scope", f"loop variable {s.var} shadows an enclosing loop", s, ranges)
                self.name(str(s.var), s.var, s)
                inner = {**ranges, s.var: (0, max(s.extent - 1, 0))}
                self.block(s.body, loops + (s,), visible, inner)
            elif isinstance(s, Alloc):
                self.alloc(s, ranges)
                visible.add(id(s.tile))
            elif isinstance(s, Dma):
                self.dma(s, loops, visible, ranges)
            elif isinstance(s, Instr):
                self.instr(s, loops, visible, ranges)
            else:
                self.fail("unique-names", f"unknown statement type {type(s).__name__}")

    def alloc(self, s: Alloc, ranges: dict) -> None:
        t = s.tile
        self.name(t.name, t, s)
        if len(t.shape) < 2:
            self.fail("tile-rank", f"tile {t.name} has rank {len(t.shape)}; on-chip tiles are >= 2-D", s, ranges)
        if t.memory not in MEMORIES or t.dtype not in DTYPE_BYTES:
            self.fail("engine-memory", f"tile {t.name}: bad memory/dtype {t.memory}/{t.dtype}", s, ranges)
        if not 1 <= t.shape[0] <= self.t.partitions:
            self.fail("partition-limit", f"tile {t.name} has {t.shape[0]} partitions "
                      f"(limit {self.t.partitions} on {self.t.name})", s, ranges)
        if t.memory == "psum" and t.bytes_per_partition > self.t.psum_bank_bytes:
            self.fail("psum-bank-size", f"PSUM tile {t.name} needs {t.bytes_per_partition} B per partition; "
                      f"one bank holds {self.t.psum_bank_bytes} B", s, ranges)

    # ------------------------------------------------------------------ operands
    def check_syms(self, exprs: Iterable[Any], loops: tuple[Loop, ...], s: Stmt, ranges: dict) -> None:
        live = {l.var for l in loops}
        for e in exprs:
            stray = _syms(e) - live
            if stray:
                self.fail("loop-var-scope", f"{sorted(map(str, stray))} used outside their loop", s, ranges)

    def region(self, r: TileRegion, loops, visible: set[int], s: Stmt, ranges: dict) -> None:
        t = r.tile
        if id(t) not in visible:
            self.fail("alloc-before-use", f"tile {t.name} is used before (or outside the scope of) its Alloc",
                      s, ranges)
        if len(r.starts) != len(t.shape) or len(r.sizes) != len(t.shape):
            self.fail("tile-rank", f"region of {t.name} has rank {len(r.sizes)}, tile has {len(t.shape)}",
                      s, ranges)
        self.check_syms(list(r.starts) + list(r.sizes), loops, s, ranges)
        for d, (st, sz, dim) in enumerate(zip(r.starts, r.sizes, t.shape)):
            if isinstance(st, int) and isinstance(sz, int):   # most regions: no sympy needed
                lo, hi, szb = (st, st), (st + sz, st + sz), (sz, sz)
            else:
                lo = _bounds(st, ranges)
                hi = _bounds(sympy.sympify(st) + sympy.sympify(sz), ranges)
                szb = _bounds(sz, ranges)
            if (lo is not None and lo[0] < 0) or (hi is not None and hi[1] > dim) or \
                    (szb is not None and szb[0] < 1):
                self.fail("region-bounds", f"region of {t.name} axis {d} may leave [0, {dim}) "
                          f"(start {st}, size {sz})", s, ranges)

    def access(self, a: HBMAccess, loops, visible: set[int], s: Stmt, ranges: dict) -> None:
        if id(a.tensor) not in self.hbm:
            self.fail("unknown-hbm", f"HBM tensor {a.tensor.name} is neither a parameter nor an output", s, ranges)
        exprs = [a.offset] + [x for pair in a.pattern for x in pair]
        self.check_syms(exprs, loops, s, ranges)
        if a.indirect is not None:
            self.region(a.indirect, loops, visible, s, ranges)
            if a.indirect.memory != "sbuf" or a.indirect.dtype != "uint32":
                self.fail("indirect-dma", "indirect offsets must be a uint32 SBUF tile", s, ranges)
            if a.view is None or a.view[0] * a.view[1] != a.tensor.numel:
                self.fail("indirect-dma-row-stride", f"indirect access on {a.tensor.name} needs a (rows, row) "
                          f"view of all {a.tensor.numel} elements, whose shape gives the row stride "
                          f"(got {a.view})", s, ranges)
        # first / last element touched, composed as text (building sympy Min/Max terms is slow)
        try:
            first = last = f"({pyexpr(a.offset)})"
            syms = _syms(a.offset)
            for i, (st, cnt) in enumerate(a.pattern):
                if i == 0 and a.indirect is not None:
                    continue  # the row comes from the index tile, checked by the simulator at run time
                span = f"(({pyexpr(cnt)}) - 1) * ({pyexpr(st)})"
                first, last = f"{first} + min({span}, 0)", f"{last} + max({span}, 0)"
                syms |= _syms(cnt) | _syms(st)
        except ExprError:
            return
        lo, hi = _grid_range(first, syms, ranges), _grid_range(last, syms, ranges)
        if (lo is not None and lo[0] < 0) or (hi is not None and hi[1] >= a.tensor.numel):
            self.fail("hbm-bounds", f"access of {a.tensor.name} reaches elements "
                      f"[{lo[0] if lo else '?'}, {hi[1] if hi else '?'}] outside [0, {a.tensor.numel})",
                      s, ranges)

    # ------------------------------------------------------------------ statements
    def dma(self, s: Dma, loops, visible: set[int], ranges: dict) -> None:
        sides = (s.dst, s.src)
        hbm = [x for x in sides if isinstance(x, HBMAccess)]
        tiles = [x for x in sides if isinstance(x, TileRegion)]
        if len(hbm) != 1 or len(tiles) != 1:
            self.fail("dma-memory", "the IR models a DMA as a load or a store: exactly one side must be an HBM access", s, ranges)
        a, r = hbm[0], tiles[0]
        self.access(a, loops, visible, s, ranges)
        self.region(r, loops, visible, s, ranges)
        findings = check_instr(name="dma_copy", engine="dma", target=self.t,
                               ops={"dst": _opnd(s.dst), "src": _opnd(s.src)})
        if a.indirect is not None:
            base = tuple(a.view) if a.view is not None else (a.tensor.numel,)
            pattern = [[x if _is_int(x) else None for x in pair] for pair in a.pattern]
            findings += check_indirect(base, "hbm", pattern, 0, _opnd(a.indirect))
        self.spec_findings(findings, s, ranges)
        if len(a.sizes) != len(r.sizes) or any(
                (x != y) if _is_int(x) and _is_int(y) else sympy.expand(sympy.sympify(x) - sympy.sympify(y)) != 0
                for x, y in zip(a.sizes, r.sizes)):
            self.fail("dma-shape", f"HBM side counts {list(a.sizes)} != tile side sizes {list(r.sizes)}", s, ranges)
        if s.dst is a:
            if a.tensor.kind == "input":
                self.fail("readonly-param", f"DMA writes input parameter {a.tensor.name} (mark it 'inout')",
                          s, ranges)
            self.written.add(id(a.tensor))

    def instr(self, s: Instr, loops, visible: set[int], ranges: dict) -> None:
        if not isinstance(s.dst, TileRegion):
            self.fail("hbm-operand", f"{s.op} writes {type(s.dst).__name__}; compute writes SBUF/PSUM tiles",
                      s, ranges)
        regions = {"dst": s.dst}
        for key, v in list(s.srcs.items()) + list(s.attrs.items()):
            if isinstance(v, (HBMAccess, HBMTensor)):
                self.fail("hbm-operand", f"{s.op} operand {key} is in HBM; compute engines never read HBM",
                          s, ranges)
            if isinstance(v, TileRegion):
                regions[key] = v
            else:
                self.check_syms(_flat(v), loops, s, ranges)
        for r in regions.values():
            self.region(r, loops, visible, s, ranges)
        ops = {k: _opnd(r) for k, r in regions.items()}
        ops.update({k: v for k, v in s.srcs.items() if not isinstance(v, TileRegion)})
        attrs = {k: v for k, v in s.attrs.items() if not isinstance(v, TileRegion)}
        self.spec_findings(check_instr(s.op, s.engine, self.t, ops, attrs), s, ranges)
        check = getattr(self, f"op_{s.op}", None)
        if check:
            check(s, regions, ranges)

    def need(self, s: Instr, regions: dict, keys: tuple[str, ...], ranges: dict) -> None:
        missing = [k for k in keys if k not in regions]
        if missing:
            self.fail("engine-memory", f"{s.op} needs tile operand(s) {missing}", s, ranges)

    def op_nc_matmul(self, s: Instr, regions: dict, ranges: dict) -> None:
        self.need(s, regions, ("stationary", "moving"), ranges)
        if any(len(regions[k].sizes) != 2 for k in ("stationary", "moving", "dst")):
            self.fail("matmul-shape", "nc_matmul operands are 2-D", s, ranges)

    def op_nc_transpose(self, s: Instr, regions: dict, ranges: dict) -> None:
        self.need(s, regions, ("data",), ranges)

    def op_tensor_tensor(self, s: Instr, regions: dict, ranges: dict) -> None:
        self.need(s, regions, ("data1", "data2"), ranges)

    def op_tensor_reduce(self, s: Instr, regions: dict, ranges: dict) -> None:
        self.need(s, regions, ("data",), ranges)
        f = reduce_axis_finding(s.attrs.get("axis", (1,)), len(regions["data"].sizes))
        if f is not None:
            self.fail(f.rule, f.cited(), s, ranges)

    # ------------------------------------------------------------------ capacity
    def capacity(self) -> None:
        def worst(body: list[Stmt], measure) -> tuple[int, list[Tile]]:
            own = [s.tile for s in body if isinstance(s, Alloc) and measure(s.tile)]
            best: tuple[int, list[Tile]] = (0, [])
            for s in body:
                if isinstance(s, Loop):
                    sub = worst(s.body, measure)
                    if sub[0] > best[0]:
                        best = sub
            return sum(measure(t) for t in own) + best[0], own + best[1]

        n, tiles = worst(self.k.body, lambda t: 1 if t.memory == "psum" else 0)
        if n > self.t.psum_banks:
            self.fail("psum-banks", f"{n} PSUM tiles live at once ({', '.join(t.name for t in tiles)}); "
                      f"{self.t.name} has {self.t.psum_banks} banks")
        b, tiles = worst(self.k.body, lambda t: t.bytes_per_partition if t.memory == "sbuf" else 0)
        if b > self.t.sbuf_bytes_per_partition:
            self.fail("sbuf-capacity", f"{b} SBUF bytes per partition live at once "
                      f"({', '.join(f'{t.name}={t.bytes_per_partition}' for t in tiles)}); "
                      f"{self.t.name} allows {self.t.sbuf_bytes_per_partition}")


def _opnd(x: Any) -> Opnd:
    """The specification's view of an IR operand (sizes only when they are plain ints)."""
    if isinstance(x, HBMAccess):
        sizes = list(x.sizes)
        mem = "hbm"
    else:
        sizes = list(x.sizes)
        mem = x.memory
    parts = int(sizes[0]) if sizes and _is_int(sizes[0]) else None
    free: int | None = 1
    for z in sizes[1:]:
        free = free * int(z) if free is not None and _is_int(z) else None
    return Opnd(mem, x.dtype, parts, free)


def _flat(v: Any) -> list:
    if isinstance(v, (list, tuple)):
        return [y for x in v for y in _flat(x)]
    return [v]


def verify_kernel(k: Kernel, target: Target) -> None:
    """Raise :class:`IRVerificationError` on the first broken rule (see ``RULES``)."""
    _KernelVerifier(k, target).run()


def verify_program(p: Program, target: Target) -> None:
    """Verify every kernel once, plus the host program (:func:`verify_host_program`)."""
    for k in _unique_kernels(p).values():
        verify_kernel(k, target)
    verify_host_program(p)


def _unique_kernels(p: Program) -> dict[str, Kernel]:
    kernels: dict[str, Kernel] = {}
    for k in p.kernels:
        if kernels.setdefault(k.name, k) is not k:
            raise IRVerificationError(k.name, "unique-names", f"two different kernels are named {k.name}")
    return kernels


def verify_host_program(p: Program) -> None:
    """The host program's naming: kernel names are unique, every host value is defined before it
    is used and calls match their kernel's signature. The compile pipeline runs this after
    lowering (each kernel was verified as it was built)."""
    _unique_kernels(p)
    defined = set(p.inputs) | set(p.constants)

    def use(names: Iterable[str], where: str) -> None:
        for n in names:
            if n not in defined:
                raise IRVerificationError(p.name, "host-names", f"{where} uses {n!r} before it is defined")

    def refs(v: Any) -> list[str]:
        if isinstance(v, Ref):
            return [v.name]
        if isinstance(v, (list, tuple)):
            return [n for x in v for n in refs(x)]
        if isinstance(v, dict):
            return [n for x in v.values() for n in refs(x)]
        return []

    for st in p.steps:
        if isinstance(st, KernelCall):
            if len(st.args) != len(st.kernel.params) or len(st.results) != len(st.kernel.returned):
                raise IRVerificationError(st.kernel.name, "host-names", "call arity does not match the kernel")
            use(st.args, f"call of {st.kernel.name}")
            defined.update(st.results)
        elif isinstance(st, View):
            use([st.base], f"view {st.name}")
            defined.add(st.name)
        elif isinstance(st, Empty):
            defined.add(st.name)
        elif isinstance(st, (Fallback, Collective)):
            use(refs(st.args) + refs(st.kwargs), f"host call {st.target}")
            defined.update(st.results)
        elif isinstance(st, UserKernelCall):
            use(refs(st.args), f"call of {st.kernel}")
            defined.update(st.results)
    use(refs(p.outputs), "graph outputs")
