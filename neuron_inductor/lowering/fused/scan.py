"""``cumsum`` / ``cumprod`` inside a fused kernel, so a chain of scans and pointwise work keeps its
intermediates on chip instead of writing each to HBM between kernels (mamba's selective scan).

A scan joins a fused group (``graph/fusion.py``) only along the group's last axis, which the tile
plan puts on the free axis, kept apart from its neighbours (``fused/tiling.py``). Each free chunk is
one VectorE ``tensor_tensor_scan`` (``r[i] = op1(ones[i] * r[i-1], x[i])``, as the standalone
kernel in ``scan.py``); when the axis spans several chunks they run in a sequential loop and a
carry tile holds each row's running value between them: one column per row of the scan (one per
iteration of the reduced loops when the plan accumulates a middle-axis reduction element-wise).
Only fp32 scans are fused; the others keep the standalone kernel and its exactness checks.
"""
from __future__ import annotations

import torch
import torch.fx as fx

from ...ir import TileRegion
from ...spec import AluOp
from ..builder import TVal
from ..engine_balance import charge
from .group import last_axis
from .variants import kept_free_shape
from ..pointwise import copy

aten = torch.ops.aten

#: scan -> (combining ALU op, identity)
SCANS = {aten.cumsum.default: ("add", 0.0), aten.cumprod.default: ("multiply", 1.0)}


def scan_dim(n: fx.Node) -> int:
    """The scanned axis of scan node ``n``."""
    return int(n.args[1]) % max(n.args[0].meta["val"].dim(), 1)


def fusable_scan(n: fx.Node) -> bool:
    """An fp32 scan along its input's last non-unit axis (where a fused group's free axis lies)."""
    if n.op != "call_function" or n.target not in SCANS:
        return False
    x, y = n.args[0].meta.get("val"), n.meta.get("val")
    return isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.dim() >= 1 \
        and x.numel() > 0 and x.dtype == y.dtype == torch.float32 and scan_dim(n) == last_axis(x.shape)


def scan_fits(domain, reduce_axes, col_axes) -> bool:
    """A group over ``domain`` with these reductions can hold scans along its last axis: the plan
    then has that axis on the free side (no reductions, a row reduction over it alone, or reductions
    over other axes accumulated element-wise), and no column sums."""
    R = frozenset(reduce_axes)
    if col_axes:
        return False
    return not R or R == {last_axis(domain)} or kept_free_shape(domain, R)


def scan_value(ctx, n: fx.Node, x: TVal, ones: TileRegion, carry: TileRegion | None) -> TVal:
    """``n``'s scan of ``x`` over the current chunk; ``carry`` (or the identity) is the running value
    before it, and takes the chunk's last column after it."""
    op, init = SCANS[n.target]
    at = ctx.lw.at
    if x.kind != "full" or x.dtype != "float32":
        x = copy(ctx, x, "float32", "full")
    out = ctx.new("full", "float32")
    charge(ctx, "vector", 2)  # "max(MIN_II, 2N)" VectorE cycles: its share of the chain
    ctx.kb.tensor_tensor_scan(out, data0=ones, data1=x.region, initial=carry if carry is not None else init,
                              op0=AluOp.multiply, op1=op)
    if carry is not None:
        last = TileRegion(out.tile, (out.starts[0], out.starts[1] + at.cols - 1), (at.rows, 1))
        ctx.kb.copy("vector", carry, last)
    return TVal("full", out)


def open_carries(em, columns: int) -> None:
    """Before a free-axis loop of several chunks (``em``: the fused emitter): each scan's running
    values at its identity, ``columns`` scanned rows per partition (one per reduced-loop iteration)."""
    em.carries = {}
    if em.tp.nchunks == 1:
        return
    for n in em.tp.scans:
        t = em.kb.tile((em.pmax, columns), "float32", prefix="carry")
        em.kb.memset(t.region(em.at.rows, columns), SCANS[n.target][1])
        em.carries[n] = t


def scan_node(em, n: fx.Node, x: TVal) -> TVal:
    """Scan node ``n`` of ``x`` at the emitter's current chunk, with its carry column (if any)."""
    at, carry = em.at, em.carries.get(n)
    region = None if carry is None else TileRegion(carry, (0, em.carry_col), (at.rows, 1))
    return scan_value(em.ctx, n, x, em.ones.region(at.rows, at.cols), region)
