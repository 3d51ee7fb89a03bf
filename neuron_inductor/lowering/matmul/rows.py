"""A GEMM computed inside a fused kernel's row loop, so row reductions of its output (an RMSNorm after
the attention output projection and residual add) run in the same kernel.

The matmul epilogue (``gemm.py``) has no reductions: its output tiles may split rows over several
PSUM banks. When the GEMM's output rows fit one bank (N <= 512 fp32 columns) and the fused group
reading it reduces along exactly those rows, the fused group's own plan (``plan_tiles``: whole rows,
row tiles on partitions) drives the kernel and each row tile's GEMM result is computed where the
group would have loaded it: rhs resident for the whole kernel, the tile's lhs^T, K accumulated in one
PSUM bank (``multi.gemm_rows``). The partitioner forms these groups in
``graph/epilogue_absorb.py``.
"""
from __future__ import annotations

import sympy
import torch
import torch.fx as fx

from ...config import Config
from ..builder import KernelBuilder
from ..fused.emitter import FusedEmitter
from ..fused.group import FusedGroup, Source
from ..fused.tiling import plan_tiles
from ..layout import LoweringError, hw_dtype
from .multi import gemm_rows, load_rhs, mm_anchors
from ..registry import KernelContext, register_lowering

aten = torch.ops.aten


class _RowsEmitter(FusedEmitter):
    """The fused emitter, with the GEMM's row tile computed before each pass reads it."""

    def setup_gemm(self, mm: fx.Node, in_dt: str) -> None:
        self.mm, self.in_dt = mm, in_dt
        self.M, self.N = (int(s) for s in mm.meta["val"].shape)
        self.K = int(mm.args[0].meta["val"].shape[-1])
        st = self.tp.node_strides[mm]
        if self.tp.F is None or self.tp.P is None or st[self.tp.F] != 1 or st[self.tp.P] != self.N \
                or self.tp.fc != self.N or self.tp.accumulate or self.tp.seq:
            raise LoweringError("GEMM rows are not the fused group's row tiles")
        self.st = st

    def hoist(self) -> None:
        """The fused group's hoisted loads, then the GEMM's rhs, resident for the whole kernel."""
        super().hoist()
        self.rhsT = load_rhs(self.kb, self.sources[self.mm.args[1]], self.K, self.N, self.in_dt)

    def eval(self, accs, pre_only: bool = False, post_only: bool = False) -> None:
        if not post_only and self.mm not in self.vals:
            row0 = sympy.expand(self.offset_expr(self.st) / self.N)
            self.vals[self.mm] = gemm_rows(self.kb, self.sources[self.mm.args[0]], self.rhsT, self.K,
                                           self.N, row0, self.at.rows, self.M, self.in_dt)
        super().eval(accs, pre_only, post_only)


def lower_matmul_rows(group: FusedGroup, sources: dict[fx.Node, Source], kb: KernelBuilder,
                      out_tensors: dict, out_meta: dict, cfg: Config) -> None:
    (mm,) = mm_anchors(group)
    if mm.target is not aten.mm.default or mm.meta["val"].shape[-1] > kb.target.matmul_n_max:
        raise LoweringError("a GEMM in a row loop must be a 2-D mm of at most one PSUM bank of columns")
    a, b = mm.args[0], mm.args[1]
    if a in group.members or b in group.members:
        raise LoweringError("matmul operands computed in the same kernel")
    dts = {sources[a].base_dtype, sources[b].base_dtype}
    if len(dts) != 1 or next(iter(dts)) not in ("float32", "bfloat16", "float16"):
        raise LoweringError(f"matmul of {sorted(dts)}")
    fg = FusedGroup(group.nodes, group.outputs, group.domain, group.reduce_axes, col_axes=group.col_axes)
    tp = plan_tiles(fg, sources, kb.target, cfg.free_chunk, seeded=frozenset({mm}))
    em = _RowsEmitter(tp, sources, kb, out_tensors, out_meta)
    em.setup_gemm(mm, hw_dtype(next(iter(dts))))
    em.emit()
    kb.plan += f"; GEMM {em.M}x{em.K} @ {em.K}x{em.N} per row tile (rhs resident, K in PSUM)"


@register_lowering("matmul_rows", kind="group")
def lower_matmul_rows_group(ctx: KernelContext) -> None:
    lower_matmul_rows(ctx.group, ctx.sources, ctx.builder, ctx.outputs, ctx.out_meta, ctx.config)
