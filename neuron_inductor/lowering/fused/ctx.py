"""What a pointwise lowering sees inside a fused kernel: builder, loop state, allocation, iota.

``call`` runs one op's lowering and recycles the tiles it allocated that its result does not hold
(an int32 copy of a constant, the words of a shift...): they die with the op, so a long integer
chain (a hash) stays within SBUF instead of keeping one tile per instruction.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import sympy
import torch.fx as fx

from ...ir import TileRegion
from ..builder import TVal
from ..layout import LoweringError


@dataclass
class LoopState:
    """Where a fused kernel's emission is: the variables of the loops opened so far (outer and
    sequential axes by merged-domain axis, the row tile ``ip``, the free chunk ``fcv``) and the
    extents of the current tile (``rows`` partitions, ``cols`` free elements; ragged in a last one)."""

    loop_vars: dict[int, sympy.Expr] = field(default_factory=dict)
    ip: sympy.Expr = sympy.Integer(0)
    fcv: sympy.Expr = sympy.Integer(0)
    rows: sympy.Expr = sympy.Integer(1)
    cols: sympy.Expr = sympy.Integer(1)


class FusedCtx:
    """What a pointwise lowering sees: the builder, the current tile extents, allocation, iota."""

    def __init__(self, lower: Any) -> None:  # the fused emitter (emitter.py) this context serves
        self.lw = lower
        self.kb = lower.kb
        #: tiles allocated by the op being lowered; those its result does not hold are temporaries
        self.fresh: list = []

    def call(self, fn: Callable, node: fx.Node, *args: Any, **kwargs: Any) -> TVal:
        """``fn(self, node, *args)``, then its temporaries back to the pool."""
        self.fresh = []
        v = fn(self, node, *args, **kwargs)
        keep = {id(r.tile) for r in (getattr(v, "region", None), getattr(v, "hi", None)) if r is not None}
        for t in self.fresh:
            if id(t) not in keep:
                self.kb.release(t)
        self.fresh = []
        return v

    def new(self, kind: str, dtype: str) -> TileRegion:
        at = self.lw.at
        cols = self.lw.tp.fc if kind == "full" else 1
        t = self.kb.tile((self.kb.target.partitions, cols), dtype, prefix="t")
        self.fresh.append(t)
        return t.region(at.rows, at.cols if kind == "full" else 1)

    def iota(self, node: fx.Node, start, step, dtype: str) -> TVal:
        if not all(float(v).is_integer() for v in (start, step)):
            raise LoweringError("arange with a fractional start or step")
        tp, at = self.lw.tp, self.lw.at
        st = tp.node_strides[node]
        kind = "row" if tp.F is None or st[tp.F] == 0 else "full"
        dst = self.new(kind, dtype)
        pat = [[int(step) * (st[tp.F] if kind == "full" else 0), at.cols if kind == "full" else 1]]
        offset = int(start) + int(step) * self.lw.offset_expr(st)
        cm = int(step) * st[tp.P] if tp.P is not None else 0
        self.kb.iota(dst, pattern=pat, offset=offset, channel_multiplier=cm)
        return TVal(kind, dst, bound=abs(int(start)) + abs(int(step)) * math.prod(tp.D0))
