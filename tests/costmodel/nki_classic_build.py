"""The classic-NKI front end's model of what the Neuron compiler does to a traced kernel before it
runs (hoisting loop-invariant loads, spilling arrays that do not fit in SBUF), and the conversion of
the recording to tile IR."""
from __future__ import annotations

import math
from typing import Any

import sympy

from neuron_inductor.ir.nodes import Alloc, Dma, HBMTensor, Instr, Loop, Tile

from nki_classic_core import (HBM, HView, View, _LoopRec, _Op, _Recorder)

def _lca(stacks: list[tuple]) -> tuple:
    common = stacks[0]
    for s in stacks[1:]:
        n = 0
        while n < min(len(common), len(s)) and common[n] is s[n]:
            n += 1
        common = common[:n]
    return common


def _symbols(x) -> set:
    return set(x.free_symbols) if isinstance(x, sympy.Basic) else set()


def _load_deps(op: _Op) -> set:
    src = op.srcs["src"]
    deps = _symbols(sympy.sympify(src.offset))
    for st, c, _ in src.pattern:
        deps |= _symbols(sympy.sympify(st)) | _symbols(sympy.sympify(c))
    return deps


def _hoist(items: list, chain: list, pending: dict) -> list:
    """Loop-invariant loads leave the loops they do not depend on, as the Neuron compiler hoists
    them: a load inside loops ``L1..Ln`` moves before the outermost ``Lj`` whose variable its address
    does not use, wrapped in the inner loops it does use (NKIBench's add_rmsnorm_matmul reloads its
    weight tile in every row block in source; the profile shows it read from HBM once)."""
    out: list = []
    for it in items:
        if isinstance(it, _LoopRec):
            it.body = _hoist(it.body, chain + [it], pending)
            out.extend(pending.pop(id(it), []))
            out.append(it)
            continue
        if it.kind == "dma" and it.op == "load" and chain:
            deps = _load_deps(it)
            free = [j for j, lp in enumerate(chain) if lp.var not in deps]
            dst = it.dst.buf
            if free and dst.tile.bytes_per_partition * math.prod(
                    lp.extent for lp in chain[free[0] + 1:] if lp.var in deps) <= SBUF_CAPACITY:
                j = free[0]
                gone = {lp.var: 0 for lp in chain[j:] if lp.var not in deps}
                it.dst.blk = tuple(sympy.sympify(b).xreplace(gone) for b in it.dst.blk)
                nest: Any = it
                for lp in reversed([lp for lp in chain[j + 1:] if lp.var in deps]):
                    nest = _LoopRec(lp.var, lp.extent, lp.kind, [nest])
                pending.setdefault(id(chain[j]), []).append(nest)
                continue
        out.append(it)
    return out


def _bufs(op: _Op) -> list:
    return [r.buf for r in [op.dst, *op.srcs.values()] if isinstance(r, View)]


#: SBUF bytes per partition the trn1 compiler gives a kernel (192 KiB less 16 KiB reserved)
SBUF_CAPACITY = 176 * 1024
DEBUG = False


def _views(op: _Op) -> list:
    return [r for r in [op.dst, *op.srcs.values()] if isinstance(r, View)]


#: spilled array -> the share of it that does not fit (the compiler keeps the rest on chip)
SPILL_SHARE: dict = {}


def _spilled(root: list, capacity: int) -> set:
    """Arrays the compiler cannot keep on chip. An array lives in the innermost loop body enclosing
    all its uses and holds, per block dimension, as many blocks as the loops inside that body
    which index it run through. Wherever the arrays live at once exceed SBUF, the largest are
    spilled: written out to HBM and read back, or re-loaded from their source when they are loads
    (NKIBench's profiles: bmm_softmax and gqa_full spill ~0.75 and ~1.1 GB of scores; matmul
    re-reads its 160 KiB-per-partition weight block 32 times, 9 GB of HBM reads)."""
    access: dict[Any, list] = {}
    # each use with its enclosing loops and, per enclosing body, the index of the statement it is in
    def collect(items, stack, path):
        for i, it in enumerate(items):
            if isinstance(it, _LoopRec):
                collect(it.body, stack + (it,), path + (i,))
            else:
                for v in _views(it):
                    blk = v.blk if v is it.dst else None  # blocks held are the blocks written
                    access.setdefault(v.buf, []).append((stack, blk, path + (i,)))
    collect(root, (), ())
    home: dict[Any, tuple] = {}
    span: dict[Any, tuple[tuple, int, int]] = {}
    size: dict[Any, int] = {}
    for buf, uses in access.items():
        if buf.memory != "sbuf":
            continue
        where = _lca([st for st, _, _ in uses])
        d = len(where)
        live = 1
        for k, n in enumerate(buf.blocks):
            most = 1
            for st, blk, _ in uses:
                if blk is not None and k < len(blk):
                    syms = _symbols(sympy.sympify(blk[k]))
                    most = max(most, math.prod(lp.extent for lp in st[d:] if lp.var in syms))
            live *= min(n, most)
        idx = [p[d] for _, _, p in uses]
        home[buf], size[buf] = where, live * buf.tile.bytes_per_partition
        span[buf] = (uses[0][2][:d], min(idx), max(idx))
    # live at once: arrays of one body whose statement spans overlap, plus those of enclosing
    # bodies whose span covers the statement holding this body
    out: set = set()
    by_body: dict[tuple, list] = {}
    for b, (path, lo, hi) in span.items():
        by_body.setdefault(path, []).append(b)
    for path, bufs in by_body.items():
        outer = [b for q, bs in by_body.items() if len(q) < len(path) and path[:len(q)] == q
                 for b in bs if span[b][1] <= path[len(q)] <= span[b][2]]
        for i in sorted({x for b in bufs for x in (span[b][1], span[b][2])}):
            live = outer + [b for b in bufs if span[b][1] <= i <= span[b][2]]
            while (excess := sum(size[b] for b in live if b not in out) - capacity) > 0:
                b = max((b for b in live if b not in out), key=lambda b: size[b])
                out.add(b)
                SPILL_SHARE[b] = max(SPILL_SHARE.get(b, 0.0), min(1.0, excess / size[b]))
    for b in out:  # a spilled load is re-issued whole where it is read
        if any(it.kind == "dma" and it.op == "load" and it.dst.buf is b for it in _ops(root)):
            SPILL_SHARE[b] = 1.0
    if DEBUG:
        for b in out:
            print("spill", b.tile, b.blocks, size[b])
    return out


def _ops(items: list):
    for it in items:
        if isinstance(it, _LoopRec):
            yield from _ops(it.body)
        else:
            yield it


def _spill(items: list, spilled: set, homes: dict) -> list:
    """Each write to a spilled array is followed by a store of the region to HBM, and a read is
    preceded by a load back unless the same statement list already wrote or loaded it (a load from
    HBM into a spilled array is simply re-issued where it is read)."""
    out: list = []
    on_chip: set = set()
    for it in items:
        if isinstance(it, _LoopRec):
            it.body = _spill(it.body, spilled, homes)
            out.append(it)
            continue
        reads = [v for v in (it.srcs.values() if it.kind == "instr" else [it.srcs["src"]])
                 if isinstance(v, View) and v.buf in spilled and v.buf not in on_chip]
        for v in reads:
            src = _home(v, homes)
            part = View(v.buf, v.starts, [v.sizes[0], src.sizes[1]], v.axes)
            out.append(_Op("dma", "dma", "load", part, {"src": src}, {}))
            on_chip.add(v.buf)
        if it.kind == "dma" and it.op == "load" and it.dst.buf in spilled:
            continue  # rematerialised where it is read
        out.append(it)
        if isinstance(it.dst, View) and it.dst.buf in spilled:
            dst = _home(it.dst, homes)
            part = View(it.dst.buf, it.dst.starts, [it.dst.sizes[0], dst.sizes[1]], it.dst.axes)
            out.append(_Op("dma", "dma", "store", dst, {"src": part}, {}))
            on_chip.add(it.dst.buf)
    return out


def _home(v: View, homes: dict) -> HView:
    """A contiguous HBM stand-in for a spilled region (its exact address does not change the cost)."""
    buf = v.buf
    if buf not in homes:
        homes[buf] = HBM(HBMTensor(f"spill_{buf.tile.name}", math.prod(buf.tshape), buf.dtype, "output"),
                         (buf.tshape[0], math.prod(buf.tshape[1:])))
    free = math.prod(v.sizes[1:]) * SPILL_SHARE.get(buf, 1.0)
    return HView(homes[buf], 0, [(math.prod(buf.tshape[1:]), v.sizes[0], 0), (1, free, 1)])


def _build(rec: _Recorder, hoist: bool = True, capacity: int = SBUF_CAPACITY) -> list:
    root = _hoist(rec.root, [], {}) if hoist else rec.root
    spilled = _spilled(root, capacity)
    homes: dict = {}
    root = _spill(root, spilled, homes)
    rec.params.extend(h.t for h in homes.values())
    access: dict[Any, list[tuple]] = {}

    def collect(items, stack):
        for it in items:
            if isinstance(it, _LoopRec):
                collect(it.body, stack + (it,))
            else:
                for b in _bufs(it):
                    access.setdefault(b, []).append(stack)
    collect(root, ())
    allocs: dict[int, list[Tile]] = {}
    for buf, stacks in access.items():
        where = _lca(stacks)
        allocs.setdefault(id(where[-1]) if where else 0, []).append(buf.tile)

    def conv(items, key) -> list:
        out: list = [Alloc(t) for t in allocs.get(key, [])]
        for it in items:
            if isinstance(it, _LoopRec):
                out.append(Loop(it.var, it.extent, it.kind, conv(it.body, id(it))))
            elif it.kind == "dma":
                out.append(Dma(it.dst.build(), it.srcs["src"].build()))
            else:
                attrs = {k: v for k, v in it.attrs.items() if not k.startswith("_")}
                srcs = {k: (v.build() if isinstance(v, View) else v) for k, v in it.srcs.items()}
                out.append(Instr(it.engine, it.op, it.dst.build(), srcs, attrs))
        return out
    return conv(root, 0)


