"""A GEMM whose lhs a fused group computes row by row (an RMSNorm before a projection), in one kernel.

The partitioner (``graph/prologue_absorb.py``) folds the lhs's fused group into the GEMM's group.
Here the fused group's own plan (``plan_tiles``: whole rows of K on the free axis, row tiles on
partitions, one pipelined iteration per row tile) drives the kernel, and each finished row tile of
the lhs, instead of being stored to HBM and read back by a second kernel, is transposed on VectorE
(exact with NaN/Inf: ``transpose.tensor_transpose``) and multiplied against the rhs, resident for
the whole kernel, one PSUM bank of output columns at a time. The lhs values are the fused group's
(the same ops in the same order) and K accumulates in PSUM in ascending k tiles as in every GEMM
plan, so numerics are those of the two kernels it replaces.

Only where the lhs transposes run on VectorE (trn1 fp32: the VectorE time then overlaps TensorE
instead of adding an HBM round trip); elsewhere, and for shapes the plan does not fit, lowering
refuses and the two groups are lowered on their own.
"""
from __future__ import annotations

import sympy
import torch
import torch.fx as fx

from ...config import Config
from ...ir import Alloc, HBMAccess, Loop, TileRegion
from ..builder import KernelBuilder, TVal, ceil_div
from ..fused.emitter import FusedEmitter
from ..fused.group import FusedGroup, Source, sbuf_peak
from ..fused.tiling import plan_tiles
from ..layout import LoweringError, hw_dtype, torch_dtype_name
from ..loops import maybe_loop, ragged
from ..registry import VIEWS, KernelContext, register_lowering
from ..transpose import tensor_transpose, tensor_transpose_exact
from .multi import load_rhs

aten = torch.ops.aten


class _PrologueEmitter(FusedEmitter):
    """The fused emitter of the lhs's group; the lhs row tile it would store is multiplied instead."""

    def setup_gemm(self, mm: fx.Node, in_dt: str, out, keep_lhs: bool) -> None:
        """Check the plan gives whole lhs rows per row tile; ``out``: the GEMM's HBM output;
        ``keep_lhs``: the lhs is read outside the kernel too (stored as well as multiplied)."""
        self.mm, self.lhs, self.in_dt, self.out, self.keep_lhs = mm, mm.args[0], in_dt, out, keep_lhs
        self.M, self.N = (int(s) for s in mm.meta["val"].shape)
        self.K = int(self.lhs.meta["val"].shape[-1])
        tp, st = self.tp, self.tp.stores.get(self.lhs)
        if st is None or tp.F is None or tp.P is None or st[tp.F] != 1 or st[tp.P] != self.K \
                or tp.fc != self.K or tp.accumulate or tp.seq or tp.kept_free or tp.p_reduced:
            raise LoweringError("the lhs rows are not the fused group's row tiles")
        self.st = st

    def hoist(self) -> None:
        """The fused group's hoisted loads, then the GEMM's rhs, resident for the whole kernel."""
        super().hoist()
        self.rhsT = load_rhs(self.kb, self.sources[self.mm.args[1]], self.K, self.N, self.in_dt)

    def _store(self, n: fx.Node, v: TVal) -> None:
        if n is not self.lhs or self.keep_lhs:
            super()._store(n, v)
        if n is not self.lhs:
            return
        if v.kind != "full" or v.region.dtype != self.in_dt:
            raise LoweringError("the lhs row tile is not a full tile of the GEMM's dtype")
        kb, P, K, N = self.kb, self.pmax, self.K, self.N
        NT, KT = kb.target.matmul_n_max, kb.target.matmul_k_max
        nk, rows, src = ceil_div(K, KT), self.at.rows, v.region
        row0 = sympy.expand(self.offset_expr(self.st) / K)
        lhsT = kb.tile((KT, nk * P), self.in_dt, prefix="plhsT")
        for kk in range(nk):
            kr = min(KT, K - KT * kk)
            tensor_transpose(kb, TileRegion(lhsT, (0, kk * P), (kr, rows)),
                             TileRegion(src.tile, (src.starts[0], src.starts[1] + KT * kk), (rows, kr)))
        with maybe_loop(kb, ceil_div(N, NT), "affine", "pn") as c:
            cols = ragged(N, NT, c)
            ps = kb.tile((P, NT), "float32", "psum", prefix="pacc")
            for kk in range(nk):
                kr = min(KT, K - KT * kk)
                kb.nc_matmul(ps.region(rows, cols), stationary=TileRegion(lhsT, (0, kk * P), (kr, rows)),
                             moving=TileRegion(self.rhsT, (0, kk * N + NT * c), (kr, cols)), accumulate=kk > 0)
            res = kb.tile((P, NT), "float32", prefix="pres")
            kb.copy("vector", res.region(rows, cols), ps.region(rows, cols))
            kb.dma(HBMAccess(self.out, sympy.expand(row0 * N + NT * c), ((N, rows), (1, cols))),
                   res.region(rows, cols))


def lower_matmul_prologue(group: FusedGroup, sources: dict[fx.Node, Source], kb: KernelBuilder,
                          out_tensors: dict, out_meta: dict, cfg: Config) -> None:
    """The kernel of a matmul group whose lhs its fused part computes (see the module docstring)."""
    (mm,) = [n for n in group.nodes if n.target not in VIEWS and n.target is aten.mm.default]
    a, b = mm.args[0], mm.args[1]
    if b in group.members or mm not in group.outputs:
        raise LoweringError("the GEMM's rhs or output is not a plain operand")
    in_dt = hw_dtype(sources[b].base_dtype)
    if in_dt != "float32" or hw_dtype(torch_dtype_name(a.meta["val"].dtype)) != in_dt:
        raise LoweringError("a fused lhs is for fp32 GEMMs (a bf16 lhs rounds on its store)")
    if tensor_transpose_exact(kb.target, in_dt):
        raise LoweringError("TensorE transposes the lhs exactly here: the two kernels' plans apply")
    M, N = (int(s) for s in mm.meta["val"].shape)
    K = int(a.meta["val"].shape[-1])
    om = out_meta[mm]
    if tuple(om.stride) != (N, 1) or om.storage_offset:
        raise LoweringError("the GEMM's output is not row-major")
    rhs_bytes = ceil_div(K, kb.target.matmul_k_max) * N * 4
    if rhs_bytes > kb.target.sbuf_bytes_per_partition // 2:
        raise LoweringError("the rhs does not stay resident beside the fused group's tiles")
    f = next((p for p in group.parts if a in p.members), None)
    if f is None or f.col_axes:
        raise LoweringError("no fused part computes the lhs")
    rest = [n for n in group.nodes if n is not mm]
    keep = a in group.outputs
    fg = FusedGroup(rest, [o for o in group.outputs if o is not mm] + ([] if keep else [a]), f.domain,
                    f.reduce_axes)
    tp = plan_tiles(fg, sources, kb.target, cfg.free_chunk)
    em = _PrologueEmitter(tp, sources, kb, out_tensors, out_meta)
    em.setup_gemm(mm, in_dt, out_tensors[mm], keep)
    em.emit()
    # the fused plan sized its tiles without the resident rhs and the GEMM's PSUM bank
    if sbuf_peak(kb.body) > kb.target.sbuf_bytes_per_partition or _psum_peak(kb.body) > kb.target.psum_banks:
        raise LoweringError("the fused lhs, the resident rhs and the accumulators do not fit on chip")
    kb.plan += f"; GEMM {M}x{K} @ {K}x{N} per row tile of its lhs (rhs resident, lhs^T on VectorE)"


def _psum_peak(body: list) -> int:
    """PSUM tiles live at once: a block's own plus its worst nested loop's (as the IR verifier counts)."""
    own = sum(1 for s in body if isinstance(s, Alloc) and s.tile.memory == "psum")
    return own + max([_psum_peak(s.body) for s in body if isinstance(s, Loop)], default=0)


@register_lowering("matmul_prologue", kind="group")
def lower_matmul_prologue_group(ctx: KernelContext) -> None:
    lower_matmul_prologue(ctx.group, ctx.sources, ctx.builder, ctx.outputs, ctx.out_meta, ctx.config)
