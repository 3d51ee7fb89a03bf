"""Balancing an elementwise chain between VectorE and ScalarE.

The fused emitter puts every ALU op on VectorE; ScalarE only runs activation functions. A chain with
many multiplies by constants and few activations (an AdamW step) then leaves ScalarE idle while
VectorE bounds the kernel. A multiply by a constant is also ScalarE's ``activation(copy, scale=c)``,
so it goes to whichever engine has the lighter share of the chain so far; so does a multiply by a
per-partition fp32 row (``activation``'s scale may be a [P, 1] tile).
"""
from __future__ import annotations

import math

from .builder import FLOAT_DTYPES, TVal


def _engine_load(ctx) -> dict[str, float]:
    """Seconds per element of the elementwise work this kernel has put on VectorE and ScalarE so
    far (``binary`` and ``unary`` only: the balance of one elementwise chain)."""
    load = getattr(ctx.kb, "_ew_engine_load", None)
    if load is None:
        load = {"vector": 0.0, "scalar": 0.0}
        ctx.kb._ew_engine_load = load
    return load


def _per_elem(ctx, engine: str, passes: int) -> float:
    t = ctx.kb.target
    if engine == "scalar":
        return passes / t.scalar_clock_hz
    return passes / (t.vector_clock_hz * max(1.0, t.vector_elems_per_cycle / t.partitions))


def charge(ctx, engine: str, passes: int) -> None:
    _engine_load(ctx)[engine] += _per_elem(ctx, engine, passes)


def scale_on_scalar(ctx, op: str, a: TVal, b: TVal, kind: str, dtype: str):
    """A float tile times a constant, or times an fp32 per-partition row, can be ScalarE's
    ``activation(copy, scale=c)`` (one fp32 multiply, rounded once to the output dtype, as VectorE's
    ``tensor_scalar`` does): it goes there when ScalarE has the lighter share of the chain, so long
    elementwise chains (an AdamW step: eight multiplies by constants among tensor-tensor ops; mamba's
    scan: rows of ``delta * a``) use both engines instead of VectorE alone. Returns (the tile, the
    scale: a number or a [P, 1] region), or None to stay on VectorE."""
    if op != "multiply" or kind != "full" or "full" not in (a.kind, b.kind) or a.kind == b.kind:
        return None
    t, o = (a, b) if a.kind == "full" else (b, a)
    if o.kind == "scalar":
        c = o.scalar
        if not isinstance(c, (int, float)) or isinstance(c, bool) or not math.isfinite(float(c)):
            return None
        c = float(c)
    elif o.kind == "row" and o.region is not None and o.region.dtype == "float32" and o.hi is None:
        c = o.region
    else:
        return None
    if dtype not in FLOAT_DTYPES or t.region.dtype not in FLOAT_DTYPES:
        return None
    load = _engine_load(ctx)
    if load["scalar"] + _per_elem(ctx, "scalar", 1) < load["vector"] + _per_elem(ctx, "vector", 1):
        charge(ctx, "scalar", 1)
        return t, c
    return None


def lighter_engine(ctx) -> str:
    """The engine (VectorE or ScalarE) with the lighter share of the chain for a one-pass copy,
    charged to it."""
    load = _engine_load(ctx)
    engine = "scalar" if load["scalar"] + _per_elem(ctx, "scalar", 1) < \
        load["vector"] + _per_elem(ctx, "vector", 1) else "vector"
    charge(ctx, engine, 1)
    return engine
