"""Two VectorE ``tensor_scalar`` instructions in a row become one with two operators.

``nisa.tensor_scalar`` computes ``(data op0 operand0) op1 operand1``; the fused emitter issues one
operator per instruction, so a chain of scalar operations (an AdamW step's ``1 / (sqrt(v) + eps)``:
a reciprocal, an add, a reciprocal) costs one VectorE pass per operator. When the first result is an
fp32 tile read only by the next ``tensor_scalar`` and dead after it, the pair is one instruction.
The engine computes in fp32 (the NKI ALU casts its inputs to float32) and the intermediate was an
fp32 tile, so each operator rounds exactly as before: the values are bit-identical.
"""
from __future__ import annotations

from dataclasses import replace

from ..ir import Alloc, Dma, HBMAccess, Instr, Kernel, Loop, Stmt, Tile, TileRegion
from ..spec import AluOp
from ..spec.ops import BITVEC


def _regions(s: Stmt) -> tuple[list[TileRegion], list[TileRegion]]:
    """(regions read, regions written) by a leaf statement."""
    if isinstance(s, Instr):
        reads = [v for v in s.srcs.values() if isinstance(v, TileRegion)]
        if s.attrs.get("accumulate") is not None:  # PSUM += reads its destination too
            reads.append(s.dst)
        return reads, [s.dst]
    reads = [s.src] if isinstance(s.src, TileRegion) else []
    for side in (s.src, s.dst):
        if isinstance(side, HBMAccess) and side.indirect is not None:
            reads.append(side.indirect)
    return reads, [s.dst] if isinstance(s.dst, TileRegion) else []


def _touches(s: Stmt, tiles: set[Tile]) -> bool:
    if isinstance(s, Loop):
        return any(_touches(t, tiles) for t in s.body)
    if isinstance(s, Alloc):
        return s.tile in tiles
    reads, writes = _regions(s)
    return any(r.tile in tiles for r in reads + writes)


def _single(s: Stmt) -> bool:
    """A one-operator fp32 arithmetic ``tensor_scalar`` on VectorE."""
    if not (isinstance(s, Instr) and s.op == "tensor_scalar" and s.engine == "vector"):
        return False
    if set(s.srcs) - {"data", "operand0"} or set(s.attrs) - {"op0", "reverse0"} or "data" not in s.srcs:
        return False
    data = s.srcs["data"]
    return isinstance(data, TileRegion) and data.dtype == s.dst.dtype == "float32" and \
        AluOp(str(s.attrs["op0"])) not in BITVEC


def _dead_after(body: list[Stmt], j: int, region: TileRegion) -> bool:
    """``region``'s value is not read after statement ``j``: the next statement touching its tile
    overwrites exactly that region without reading it, or none does (the tile is this list's)."""
    for s in body[j + 1:]:
        if not _touches(s, {region.tile}):
            continue
        if isinstance(s, (Loop, Alloc)):
            return False
        reads, writes = _regions(s)
        return not any(r.tile is region.tile for r in reads) and \
            any(w.tile is region.tile and w.starts == region.starts and w.sizes == region.sizes for w in writes)
    return True


def _pair(body: list[Stmt], i: int, local: set[Tile]) -> int | None:
    """The index of the ``tensor_scalar`` that can absorb ``body[i]``, or None."""
    a = body[i]
    if not _single(a) or a.dst.tile not in local:
        return None
    inputs = {v.tile for v in a.srcs.values() if isinstance(v, TileRegion)}
    for j in range(i + 1, len(body)):
        s = body[j]
        if isinstance(s, (Loop, Alloc)) and _touches(s, inputs | {a.dst.tile}):
            return None
        if isinstance(s, (Loop, Alloc)):
            continue
        reads, writes = _regions(s)
        if any(w.tile in inputs for w in writes):  # a's operands change before the pair would run
            return None
        if not any(r.tile is a.dst.tile for r in reads) and not any(w.tile is a.dst.tile for w in writes):
            continue
        d = s.srcs.get("data") if isinstance(s, Instr) else None
        ok = _single(s) and isinstance(d, TileRegion) and d.tile is a.dst.tile and d.starts == a.dst.starts \
            and d.sizes == a.dst.sizes and not any(v.tile is a.dst.tile for k, v in s.srcs.items()
                                                    if k != "data" and isinstance(v, TileRegion))
        same = s.dst.tile is a.dst.tile and s.dst.starts == a.dst.starts and s.dst.sizes == a.dst.sizes \
            if ok else False
        return j if ok and (same or _dead_after(body, j, a.dst)) else None
    return None


def _fuse_list(body: list[Stmt]) -> list[Stmt]:
    """``body`` (and its loops' bodies) with fusable pairs merged; the second keeps its place."""
    out = [replace(s, body=_fuse_list(s.body)) if isinstance(s, Loop) else s for s in body]
    local = _allocs(out)
    i = 0
    while i < len(out):
        j = _pair(out, i, local)
        if j is None:
            i += 1
            continue
        a, b = out[i], out[j]
        srcs = {"data": a.srcs["data"]}
        if "operand0" in a.srcs:
            srcs["operand0"] = a.srcs["operand0"]
        if "operand0" in b.srcs:
            srcs["operand1"] = b.srcs["operand0"]
        attrs = {"op0": a.attrs["op0"], "op1": b.attrs["op0"]}
        if a.attrs.get("reverse0"):
            attrs["reverse0"] = True
        if b.attrs.get("reverse0"):
            attrs["reverse1"] = True
        out[j] = Instr("vector", "tensor_scalar", b.dst, srcs, attrs)
        del out[i]
    return out


def _allocs(body: list[Stmt]) -> set[Tile]:
    return {s.tile for s in body if isinstance(s, Alloc)}


def fuse_tensor_scalar_pairs(kernel: Kernel) -> Kernel:
    """``kernel`` with every fusable pair of one-operator VectorE ``tensor_scalar`` s merged."""
    return replace(kernel, body=_fuse_list(kernel.body))
