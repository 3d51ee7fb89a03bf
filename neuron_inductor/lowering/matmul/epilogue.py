"""A GEMM epilogue's row-invariant operands (a bias, a norm weight), loaded once per kernel.

The epilogue runs once per 128 x 512 output tile. An operand with stride 0 along the output rows
(and every batch axis) is the same for every row tile, yet loaded per tile it is read ``M / 128``
times, each time by a stride-0 partition DMA that reads it once per partition: a bias of N columns
then costs as many HBM bytes as the output itself. Here each such float operand is loaded once per
kernel (or per column block of a K-streamed GEMM) into a ``[128, cols]`` tile, and every tile's
epilogue reads its columns of that tile (``bind``). Integer operands keep their per-tile loads
(int64 words, value bounds).
"""
from __future__ import annotations

import sympy
import torch.fx as fx

from ...ir import DTYPE_BYTES, HBMAccess, TileRegion
from ..builder import KernelBuilder, TVal
from ..fused.emitter import FusedEmitter
from ..layout import hw_dtype
from ..partition_ops import FLOATS

#: the hoisted tiles may take at most this share of SBUF; wider ones keep per-tile loads
MAX_SHARE = 8


def row_invariant(lw: FusedEmitter) -> dict[tuple, tuple[fx.Node, tuple[int, ...]]]:
    """Load key -> (leaf, strides) of every float epilogue operand no row or batch loop moves."""
    tp = lw.tp
    out: dict[tuple, tuple[fx.Node, tuple[int, ...]]] = {}
    for (n, a), st in tp.loads.items():
        if n in tp.col_post or hw_dtype(lw.sources[a].base_dtype) not in FLOATS:
            continue
        if all(st[k] == 0 or tp.D[k] == 1 for k in range(tp.P + 1)):
            out.setdefault(tp.load_key(a, st), (a, tuple(st)))
    return out


def _cols(lw: FusedEmitter, st, ncols: int) -> int:
    return ncols if st[lw.tp.F] != 0 else 1


def sbuf_bytes(lw: FusedEmitter, loads: dict, ncols: int) -> int:
    """SBUF bytes per partition the hoisted tiles of ``ncols`` output columns hold."""
    return sum(_cols(lw, st, ncols) * DTYPE_BYTES[hw_dtype(lw.sources[a].base_dtype)]
               for a, st in loads.values())


def worth_hoisting(kb: KernelBuilder, lw: FusedEmitter, loads: dict, ncols: int) -> bool:
    return bool(loads) and sbuf_bytes(lw, loads, ncols) <= kb.target.sbuf_bytes_per_partition // MAX_SHARE


def load(kb: KernelBuilder, lw: FusedEmitter, loads: dict, ncols: int,
         col0: sympy.Expr = sympy.Integer(0)) -> dict[tuple, TVal]:
    """``[128, ncols]`` (or ``[128, 1]``) tiles in the current block holding output columns
    ``[col0, col0 + ncols)`` of each operand on every partition: one DMA each, its partition
    stride 0 (TensorE, the GEMM's busy engine, is not asked to broadcast)."""
    P = kb.target.partitions
    out: dict[tuple, TVal] = {}
    for key, (a, st) in loads.items():
        src = lw.sources[a]
        cols = _cols(lw, st, ncols)
        t = kb.tile((P, cols), hw_dtype(src.base_dtype), prefix="epi_bc")
        step = st[lw.tp.F] if cols > 1 else 0
        param = kb.param(src.host, src.base_extent, t.dtype)
        kb.dma(t.full(), HBMAccess(param, sympy.expand(src.meta.storage_offset + step * col0),
                                   ((0, P), (step or 1, cols))))
        out[key] = TVal("full" if cols > 1 else "row", t.full())
    return out


def bind(lw: FusedEmitter, hoisted: dict[tuple, TVal], base: sympy.Expr = sympy.Integer(0)) -> None:
    """Point the emitter's hoisted loads at the columns of the tile it is about to finish
    (``lw.at``: column tile ``fcv`` of width ``tp.fc``); the hoisted tiles start at output column
    ``base``."""
    for key, v in hoisted.items():
        r = v.region
        col0 = sympy.expand(lw.at.fcv * lw.tp.fc - base) if v.kind == "full" else 0
        lw.hoisted[key] = TVal(v.kind, TileRegion(r.tile, (0, col0), r.sizes))
