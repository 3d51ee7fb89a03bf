"""Text of IR fragments (tile regions, HBM access patterns, operand values).

Shared by the kernel code generator and the IR printer so a debug dump and the generated kernel spell
the same region the same way.
"""
from __future__ import annotations

from typing import Any, Mapping

import sympy

from .nodes import HBMAccess, HBMTensor, TileRegion
from .exprs import ExprError, Ranges, fmt_float, pyexpr, simplify

#: attribute keywords whose string value names an ``nl`` ALU op / activation function / dtype
NL_NAME_ATTRS = frozenset({"op", "op0", "op1", "reduce_op", "dtype", "cmp_op"})


Names = Mapping[sympy.Expr, str]


def size_key(e: Any, ranges: Ranges | None) -> sympy.Expr | None:
    """The simplified form of a tile size / access count under which codegen may name it (None when
    it is a plain number or loop variable: nothing to gain from a name)."""
    k = simplify(e, ranges)
    return None if (k.is_Integer or k.is_Symbol) else k


def _size(e: Any, ranges: Ranges | None, names: Names | None) -> str:
    if names:
        k = size_key(e, ranges)
        if k is not None and k in names:
            return names[k]
    return pyexpr(e, ranges)


def region(r: TileRegion, ranges: Ranges | None = None, names: Names | None = None) -> str:
    """``t[a:b, c:d]`` with ``b = start + size`` simplified (``0:128``, never ``0:0 + 128``); sizes
    that codegen bound to a local name (``size_i0``) print as that name."""
    parts = []
    for st, sz in zip(r.starts, r.sizes):
        start = pyexpr(st, ranges)
        if names and size_key(sz, ranges) in names:
            stop = names[size_key(sz, ranges)] if start == "0" else f"{start} + {names[size_key(sz, ranges)]}"
        else:
            stop = pyexpr(sympy.expand(sympy.sympify(st) + sympy.sympify(sz)), ranges)
        parts.append(f"{start}:{stop}")
    return f"{r.tile.name}[{', '.join(parts)}]"


def access(a: HBMAccess, ranges: Ranges | None = None, names: Names | None = None) -> str:
    """``x.ap(pattern=[[s, c], ...], offset=e)``; a gather/scatter reads
    ``x.reshape((rows, row)).ap(..., vector_offset=idx, indirect_dim=0)``."""
    pat = ", ".join(f"[{pyexpr(s, ranges)}, {_size(c, ranges, names)}]" for s, c in a.pattern)
    base = a.tensor.name if a.view is None else f"{a.tensor.name}.reshape(({a.view[0]}, {a.view[1]}))"
    text = f"{base}.ap(pattern=[{pat}], offset={pyexpr(a.offset, ranges)}"
    if a.indirect is not None:
        text += f", vector_offset={region(a.indirect, ranges, names)}, indirect_dim=0"
    return text + ")"


def value(v: Any, ranges: Ranges | None = None, *, key: str = "", names: Names | None = None) -> str:
    """Python text of an instruction operand or attribute value."""
    if isinstance(v, TileRegion):
        return region(v, ranges, names)
    if isinstance(v, HBMAccess):
        return access(v, ranges, names)
    if isinstance(v, HBMTensor):
        return v.name
    if v is None or isinstance(v, bool):
        return repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return fmt_float(v)
    if isinstance(v, str):
        if key in NL_NAME_ATTRS:
            if not v.isidentifier():
                raise ExprError(f"attribute {key}={v!r} is not an nl name")
            return f"nl.{v}"
        raise ExprError(f"string attribute {key}={v!r} has no kernel spelling (only {sorted(NL_NAME_ATTRS)} "
                        "name nl objects)")
    if isinstance(v, sympy.Basic):
        if v.is_Float:
            return fmt_float(float(v))
        return pyexpr(v, ranges)  # ints, and int comparisons such as ``k > 0``
    if isinstance(v, list):
        return "[" + ", ".join(value(x, ranges, key=key, names=names) for x in v) + "]"
    if isinstance(v, tuple):
        items = [value(x, ranges, key=key, names=names) for x in v]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    raise ExprError(f"operand {key}={v!r} ({type(v).__name__}) has no kernel spelling")
