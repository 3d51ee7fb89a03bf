"""A GEMM computed inside a fused kernel's row loop, so row reductions of its output (an RMSNorm after
the attention output projection and residual add, a softmax of batched scores) run in the same kernel.

The matmul epilogue (``gemm.py``) has no reductions: its output tiles may split rows over several
PSUM banks. When the fused group reading the GEMM's output reduces along exactly its rows and a row
fits ``MAX_BANKS`` PSUM banks (4096 fp32 columns), the fused group's own plan (``plan_tiles``: whole
rows, row tiles on partitions) drives the kernel and each row tile's GEMM result is computed where
the group would have loaded it: rhs resident (for the whole kernel, or per batch entry of a ``bmm``:
the batch axes are outer loops of the plan, kept apart from the row axes so no row tile spans two
entries), the tile's lhs^T, K accumulated in PSUM one bank of 512 columns at a time, each bank
evicted into the row tile's SBUF result as soon as it is done (ScalarE for rows wider than one bank:
VectorE has the row reductions), so the banks are reused and transposes keep theirs
(``multi.gemm_rows``). The GEMM's output is written once, if at all, instead of stored and read back
(bmm_softmax: 1 GiB of fp32 scores one way instead of three). The partitioner forms these groups in
``graph/epilogue_absorb.py``.
"""
from __future__ import annotations

import math

import sympy
import torch
import torch.fx as fx

from ...config import Config
from ...ir import TensorMeta, contiguous_strides
from ..builder import KernelBuilder, ceil_div
from ..engine_balance import charge
from ..fused.emitter import FusedEmitter
from ..fused.group import FusedGroup, Source
from ..fused.tiling import plan_tiles
from ..layout import LoweringError, domain_strides, hw_dtype
from .multi import gemm_rows, load_rhs, mm_anchors
from ..registry import KernelContext, register_lowering

aten = torch.ops.aten
#: PSUM banks of output columns one row tile of the GEMM may span (every bank of trn1/trn2; each is
#: evicted as soon as its K steps are done, so they need not all be live at once)
MAX_BANKS = 8


class _RowsEmitter(FusedEmitter):
    """The fused emitter, with the GEMM's row tile computed before each pass reads it."""

    def setup_gemm(self, mm: fx.Node, in_dt: str) -> None:
        self.mm, self.in_dt = mm, in_dt
        shape = [int(s) for s in mm.meta["val"].shape]
        self.B, (self.M, self.N) = shape[:-2], shape[-2:]
        self.K = int(mm.args[0].meta["val"].shape[-1])
        tp, st = self.tp, self.tp.node_strides[mm]
        MN, N = self.M * self.N, self.N
        if tp.F is None or tp.P is None or st[tp.F] != 1 or st[tp.P] != N or tp.D[tp.P] > self.M \
                or tp.fc != N or tp.accumulate or tp.seq:
            raise LoweringError("GEMM rows are not the fused group's row tiles")
        # outer loop axes: batch entries (strides of whole [M, N] matrices) or rows within one
        self.batch_axes, self.row_axes = [], []
        for a in tp.outer:
            if self.B and st[a] % MN == 0 and st[a] * tp.D[a] <= MN * math.prod(self.B):
                self.batch_axes.append(a)
            elif st[a] % N == 0 and st[a] * tp.D[a] <= MN:
                self.row_axes.append(a)
            else:
                raise LoweringError("an outer loop of the fused group is not a GEMM row or batch axis")
        if self.B and math.prod(self.B) > 1 and not self.batch_axes:
            raise LoweringError("the bmm's batch is not an outer loop of the fused group")
        self.st = st
        self.rhsT = None
        self.on_outer = self.load_batch_rhs

    def _bvars(self) -> list:
        """The batch entry of the current outer iteration, one index per batch axis of the bmm."""
        if not self.B:
            return []
        flat = sympy.Integer(0)
        for a in self.batch_axes:
            flat += self.at.loop_vars[a] * (self.st[a] // (self.M * self.N))
        return [sympy.expand(flat)]

    def hoist(self) -> None:
        """The fused group's hoisted loads, then the GEMM's rhs, resident for the whole kernel
        (a batched GEMM's is loaded per batch entry, in :meth:`outer_iteration`)."""
        super().hoist()
        if not self.B or math.prod(self.B) == 1:
            self.rhsT = load_rhs(self.kb, self.sources[self.mm.args[1]], self.K, self.N, self.in_dt,
                                 [0] * len(self.B) if self.B else ())

    def load_batch_rhs(self) -> None:
        if self.B and math.prod(self.B) > 1:
            self.rhsT = load_rhs(self.kb, self.sources[self.mm.args[1]], self.K, self.N, self.in_dt,
                                 self._bvars())

    def eval(self, accs, pre_only: bool = False, post_only: bool = False) -> None:
        if not post_only and self.mm not in self.vals:
            row0 = sympy.Integer(0)
            for a in self.row_axes:
                row0 += self.at.loop_vars[a] * (self.st[a] // self.N)
            row0 = sympy.expand(row0 + self.pmax * self.at.ip)
            # wide rows: evicted on ScalarE, VectorE has the row reductions to do
            evict = "scalar" if self.N > self.kb.target.matmul_n_max else "vector"
            if evict == "scalar":
                charge(self.ctx, "scalar", 1)
            self.vals[self.mm] = gemm_rows(self.kb, self.sources[self.mm.args[0]], self.rhsT, self.K,
                                           self.N, row0, self.at.rows, self.M, self.in_dt, self._bvars(), evict)
        super().eval(accs, pre_only, post_only)


def gemm_axes(group: FusedGroup, mm: fx.Node) -> frozenset:
    """The group domain's axes along which a bmm's output steps by whole [M, N] matrices: kept apart
    from the row axes when planning, so no row tile spans two batch entries."""
    shape = [int(s) for s in mm.meta["val"].shape]
    if len(shape) == 2:
        return frozenset()
    MN = shape[-1] * shape[-2]
    D0 = [max(int(s), 1) for s in group.domain]
    st = domain_strides(TensorMeta(tuple(shape), tuple(contiguous_strides(shape)), 0, "float32"), D0)
    if st is None:
        raise LoweringError("the bmm's output does not fit the fused group's domain")
    return frozenset(a for a, s in enumerate(st) if D0[a] > 1 and s and s % MN == 0)


def lower_matmul_rows(group: FusedGroup, sources: dict[fx.Node, Source], kb: KernelBuilder,
                      out_tensors: dict, out_meta: dict, cfg: Config) -> None:
    (mm,) = mm_anchors(group)
    nmax = kb.target.matmul_n_max * MAX_BANKS
    if mm.target not in (aten.mm.default, aten.bmm.default) or mm.meta["val"].shape[-1] > nmax:
        raise LoweringError(f"a GEMM in a row loop must be an mm or bmm of at most {nmax} columns")
    a, b = mm.args[0], mm.args[1]
    if a in group.members or b in group.members:
        raise LoweringError("matmul operands computed in the same kernel")
    dts = {sources[a].base_dtype, sources[b].base_dtype}
    if len(dts) != 1 or next(iter(dts)) not in ("float32", "bfloat16", "float16"):
        raise LoweringError(f"matmul of {sorted(dts)}")
    fg = FusedGroup(group.nodes, group.outputs, group.domain, group.reduce_axes, col_axes=group.col_axes)
    tp = plan_tiles(fg, sources, kb.target, cfg.free_chunk, seeded=frozenset({mm}), apart=gemm_axes(fg, mm))
    em = _RowsEmitter(tp, sources, kb, out_tensors, out_meta)
    em.setup_gemm(mm, hw_dtype(next(iter(dts))))
    em.emit()
    batch = f"[{', '.join(map(str, em.B))}] " if em.B else ""
    kb.plan += (f"; GEMM {batch}{em.M}x{em.K} @ {em.K}x{em.N} per row tile (rhs resident"
                f"{' per batch entry' if em.B else ''}, K in PSUM, {ceil_div(em.N, kb.target.matmul_n_max)} bank(s))")


@register_lowering("matmul_rows", kind="group")
def lower_matmul_rows_group(ctx: KernelContext) -> None:
    lower_matmul_rows(ctx.group, ctx.sources, ctx.builder, ctx.outputs, ctx.out_meta, ctx.config)
