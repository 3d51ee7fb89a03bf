"""Compact human-readable dumps of tile IR kernels and host programs (debug dumps, error messages).

One statement per line, loops indented, tiles with memory/dtype/shape, HBM accesses as access
patterns and instructions prefixed with their engine. Index expressions print as the generated kernel
spells them (simplified over the enclosing loop ranges).
"""
from __future__ import annotations

from typing import Any

from . import text as _txt
from .nodes import Alloc, Dma, HBMAccess, HBMTensor, Instr, Kernel, Loop, Stmt, Tile, TileRegion
from .program import Empty, Fallback, KernelCall, Program, Ref, TensorMeta, UserKernelCall, View

_IND = "  "


def tile_decl(t: Tile) -> str:
    return f"{t.name}: {t.memory} {t.dtype}[{', '.join(str(d) for d in t.shape)}]"


def hbm_decl(t: HBMTensor) -> str:
    return f"{t.name}: {t.dtype}[{t.numel}] {t.kind}"


def _safe(fn, *a, **kw) -> str:
    """Dumps must never fail (they are used inside error messages): fall back to repr."""
    try:
        return fn(*a, **kw)
    except Exception:  # noqa: BLE001 - a malformed node is exactly what dumps are for
        return repr(a[0])


def _operand(v: Any, ranges: dict, key: str = "") -> str:
    if isinstance(v, str):
        return v
    return _safe(_txt.value, v, ranges, key=key)


def format_stmt(s: Stmt, ranges: dict | None = None) -> str:
    """One line for one statement (a loop prints only its header)."""
    ranges = ranges or {}
    t = _txt
    if isinstance(s, Loop):
        return f"for {s.var} in {s.kind}_range({s.extent}):"
    if isinstance(s, Alloc):
        return f"alloc {tile_decl(s.tile)}"
    if isinstance(s, Dma):
        def side(x: Any) -> str:
            if isinstance(x, HBMAccess):
                return _safe(t.access, x, ranges)
            if isinstance(x, TileRegion):
                return _safe(t.region, x, ranges)
            return repr(x)
        kind = "load" if isinstance(s.src, HBMAccess) else "store" if isinstance(s.dst, HBMAccess) else "dma"
        return f"dma.{kind} {side(s.dst)} <- {side(s.src)}"
    if isinstance(s, Instr):
        dst = _safe(t.region, s.dst, ranges) if isinstance(s.dst, TileRegion) else repr(s.dst)
        kw = [f"{k}={_operand(v, ranges, k)}" for k, v in {**s.srcs, **s.attrs}.items()]
        return f"{s.engine}.{s.op} {dst} <- {', '.join(kw)}"
    return repr(s)


def _lines(stmts: list[Stmt], depth: int, ranges: dict) -> list[str]:
    out = []
    for s in stmts:
        out.append(_IND * depth + format_stmt(s, ranges))
        if isinstance(s, Loop):
            inner = {**ranges, s.var: (0, max(s.extent - 1, 0))}
            out += _lines(s.body, depth + 1, inner) or [_IND * (depth + 1) + "(empty)"]
    return out


def format_kernel(k: Kernel) -> str:
    """The kernel as an indented statement listing."""
    out = [f"kernel {k.name}"]
    out += [f"{_IND}param {hbm_decl(p)}" for p in k.params]
    out += [f"{_IND}output {hbm_decl(o)}" for o in k.outputs]
    out += [f"{_IND}# from {p}" for p in k.provenance]
    if k.plan:
        out.append(f"{_IND}# plan: {' '.join(k.plan.split())}")
    out += _lines(k.body, 1, {})
    out.append(f"{_IND}return {', '.join(t.name for t in k.returned) or 'None'}")
    return "\n".join(out)


def _meta(m: TensorMeta | None) -> str:
    if m is None:
        return "?"
    off = f"+{m.storage_offset}" if m.storage_offset else ""
    return f"{m.dtype}{list(m.size)}/{tuple(m.stride)}{off}"


def _const(v: Any) -> str:
    if isinstance(v, Ref):
        return v.name
    if isinstance(v, (list, tuple)):
        inner = ", ".join(_const(x) for x in v)
        return f"[{inner}]" if isinstance(v, list) else f"({inner}{',' if len(v) == 1 else ''})"
    return repr(v)


def format_step(s: Any) -> str:
    if isinstance(s, KernelCall):
        res = ", ".join(f"{r}: {_meta(m)}" for r, m in zip(s.results, s.result_meta))
        return f"{res} = {s.kernel.name}({', '.join(s.args)})"
    if isinstance(s, UserKernelCall):
        res = ", ".join(f"{r}: {_meta(m)}" for r, m in zip(s.results, s.result_meta))
        return f"{res} = user kernel {s.kernel}({', '.join(_const(a) for a in s.args)})  # {s.op}"
    if isinstance(s, View):
        return f"{s.name} = view({s.base}, {_meta(s.meta)})"
    if isinstance(s, Empty):
        return f"{s.name} = empty({_meta(s.meta)})"
    if isinstance(s, Fallback):
        args = [_const(a) for a in s.args] + [f"{k}={_const(v)}" for k, v in s.kwargs.items()]
        lhs = ", ".join(s.results) or "_"
        return f"{lhs} = fallback {s.target}({', '.join(args)})  # {s.reason}"
    return repr(s)


def format_program(p: Program) -> str:
    """The host program (steps in order) followed by every kernel it launches."""
    metas = p.input_meta or [None] * len(p.inputs)
    out = [f"program {p.name}"]
    out += [f"{_IND}input {n}: {_meta(m)}" for n, m in zip(p.inputs, metas)]
    out += [_IND + format_step(s) for s in p.steps]
    out.append(f"{_IND}return ({', '.join(_const(o) for o in p.outputs)})")
    seen: set[int] = set()
    for k in p.kernels:
        if id(k) not in seen:
            seen.add(id(k))
            out += ["", format_kernel(k)]
    return "\n".join(out)
