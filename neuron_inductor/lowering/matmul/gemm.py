"""Matmul kernels: ``mm``/``bmm`` on TensorE with the pointwise epilogue fused.

Tile plan (docs/hardware.md, "Matmul tiling"): output tiles of 128 rows (the stationary operand's free size) by 512
columns (one PSUM bank of fp32), the contraction axis on partitions in 128-deep steps accumulated in
PSUM. Operands are read through access patterns, so a transposed or permuted operand costs no copy
kernel. The PSUM tile is evicted to SBUF once and the epilogue (bias, activation, residual add, cast)
runs on it before the single store.

:func:`lower_matmul` checks the case, plans it (``plan.plan_gemm``), and emits either the K-streamed
plan (``kstream``, when it moves fewer bytes) or the resident-lhs plan (``emitter.GemmEmitter``).
"""
from __future__ import annotations

from dataclasses import replace

import sympy
import torch
import torch.fx as fx

from ...config import Config
from ...ir import TileRegion
from ..builder import KernelBuilder, TVal, ceil_div
from ..fused.emitter import FusedEmitter
from ..fused.group import FusedGroup, Source
from ..fused.tiling import plan_tiles
from ..layout import LoweringError, hw_dtype
from ..transpose import tensor_transpose_exact
from ..registry import VIEWS, KernelContext, register_lowering
from . import epilogue as epi_hoist
from . import kstream
from .emitter import GemmEmitter
from .skinny import lower_skinny
from .operands import operand_access
from .plan import plan_gemm

aten = torch.ops.aten


def lower_matmul(group: FusedGroup, sources: dict[fx.Node, Source], kb: KernelBuilder,
                 out_tensors: dict, out_meta: dict, cfg: Config) -> None:
    """The kernel of ``group``: its ``mm`` / ``bmm`` and the epilogue fused after it."""
    mm = next(n for n in group.nodes if n.target in (aten.mm.default, aten.bmm.default))
    PMAX, KMAX, NMAX = kb.target.partitions, kb.target.matmul_k_max, kb.target.matmul_n_max
    a, b = mm.args[0], mm.args[1]
    if a in group.members or b in group.members:
        raise LoweringError("matmul operands computed in the same kernel")
    sa, sb = sources[a], sources[b]
    if sa.base_dtype != sb.base_dtype or sa.base_dtype not in ("float32", "bfloat16", "float16"):
        raise LoweringError(f"matmul of {sa.base_dtype} x {sb.base_dtype}")
    out_shape = list(mm.meta["val"].shape)
    nb = len(out_shape) - 2
    M, N = out_shape[-2:]
    K = a.meta["val"].shape[-1]
    # the epilogue walks the output's own axes: rows on partitions, columns on the free axis
    tp = plan_tiles(FusedGroup(group.nodes, group.outputs, tuple(out_shape)), sources, kb.target, NMAX,
                    seeded=frozenset({mm}), merge=False)
    lw = FusedEmitter(replace(tp, P=nb, F=nb + 1, fc=min(N, NMAX)), sources, kb, out_tensors, out_meta)
    in_dt = hw_dtype(sa.base_dtype)
    kb.plan = (f"matmul [{'x'.join(map(str, out_shape[:-2])) or '-'}] {M}x{K} @ {K}x{N} ({in_dt}); "
               f"output tiles {PMAX}x{lw.tp.fc} in PSUM, K in {ceil_div(K, KMAX)} step(s) of {KMAX} accumulated "
               f"in PSUM; epilogue: {len(group.nodes) - 1} fused op(s)")
    ranks = (a.meta["val"].dim(), b.meta["val"].dim())
    # row-invariant epilogue operands, read once into tiles the whole kernel keeps (the K-streamed
    # plan keeps them per column block instead): the tile plans get the SBUF that is left
    invariant = epi_hoist.row_invariant(lw)
    whole = epi_hoist.sbuf_bytes(lw, invariant, N) if epi_hoist.worth_hoisting(kb, lw, invariant, N) else 0
    full_budget = kb.target.sbuf_bytes_per_partition * 19 // 20
    # bytes per output column of one evicted tile and the tiles its fused epilogue allocates
    # (views allocate nothing: they only re-index the evicted tile)
    epi = 4 * (1 + 2 * sum(1 for n in group.nodes if n is not mm and n.target not in VIEWS))
    plan = plan_gemm(kb.target, sa, sb, ranks, (nb, M, N, K), in_dt, epi, full_budget - whole)
    if plan.rhs_tr or plan.rhs_res:
        lw.tp = replace(lw.tp, fc=min(N, plan.CW))
    kb.plan += plan.describe()
    if nb == 0 and _kstream(kb, lw, mm, sa, sb, *ranks, M, N, K, in_dt, plan.esz, plan.bm, full_budget,
                            2 * epi * NMAX, invariant, whole):
        return
    hoisted: dict = {}
    if whole:
        hoisted = epi_hoist.load(kb, lw, invariant, N)
        kb.plan += f"; {len(hoisted)} row-invariant epilogue operand(s) loaded once"
    GemmEmitter(kb, lw, plan, mm, (sa, sb), ranks, hoisted).emit()


def _kstream(kb: KernelBuilder, lw: FusedEmitter, mm: fx.Node, sa: Source, sb: Source, ra: int, rb: int,
             M: int, N: int, K: int, in_dt: str, esz: int, bm: int, budget: int, epi: int,
             invariant: dict, whole: int) -> bool:
    """Emit the K-streamed plan (``kstream``) when it moves fewer bytes than the resident-lhs
    plan with M blocks of ``bm`` row tiles; False leaves the kernel to that plan. The epilogue's
    row-invariant operands (``invariant``) are loaded once per column block, or once for the kernel
    (``whole`` SBUF bytes per partition) with the whole rhs resident."""
    lhs_tr = sa.meta.stride[ra - 1] == 1 and sa.meta.stride[ra - 2] != 1
    rhs_tr = sb.meta.stride[rb - 2] == 1 and sb.meta.stride[rb - 1] != 1
    resident = esz * (M * K + ceil_div(ceil_div(M, kb.target.partitions), bm) * K * N)
    per_block = invariant and epi_hoist.worth_hoisting(kb, lw, invariant, max(kstream.WIDTHS))
    col_bytes = epi_hoist.sbuf_bytes(lw, invariant, 1) if per_block else 0
    # trn1 fp32: VectorE transposes; overlapping them with the matmuls beats every other plan
    rows_tr = lhs_tr and not rhs_tr and not tensor_transpose_exact(kb.target, in_dt) and \
        kstream.prefer_rows_transposed(M, N, K, esz, budget, epi + whole)
    p = None if rows_tr else kstream.plan(M, N, K, esz, lhs_tr, rhs_tr, budget, epi, resident, col_bytes)
    whole_rhs = rows_tr or (p is None and not lhs_tr and not rhs_tr and
                            kstream.prefer_rhs_resident(M, N, K, esz, budget, epi + whole, resident))
    if p is None and not whole_rhs:
        return False
    if rows_tr:
        kb.plan += "; the whole rhs resident in SBUF, lhs rows transposed on VectorE one row tile per iteration"
    elif whole_rhs:
        kb.plan += f"; the whole rhs resident in SBUF, lhs^T streamed once in blocks of {kstream.RES_BLOCK} row tiles"
    else:
        kb.plan += (f"; K streamed in chunks of {p.kc} k tiles into fp32 SBUF accumulators of every row tile "
                    f"x {p.nb} columns (rhs read once, lhs {ceil_div(N, p.nb)}x"
                    f"{', TensorE transposes' if lhs_tr or rhs_tr else ''})")
    lw.tp = replace(lw.tp, fc=min(N, kb.target.matmul_n_max))

    def lhs_access(row0, rows, k0, kcols, transposed=False):
        if transposed:
            return operand_access(kb, sa, [], [], ra - 1, ra - 2, k0, kcols, row0, rows)
        return operand_access(kb, sa, [], [], ra - 2, ra - 1, row0, rows, k0, kcols)

    def rhs_access(k0, krows, col0, cols, transposed=False):
        if transposed:
            return operand_access(kb, sb, [], [], rb - 1, rb - 2, col0, cols, k0, krows)
        return operand_access(kb, sb, [], [], rb - 2, rb - 1, k0, krows, col0, cols)

    hoisted: dict = {}
    base = [sympy.Integer(0)]  # output column of the hoisted tiles' first column

    def prologue(col0, ncols: int) -> None:
        hoisted.update(epi_hoist.load(kb, lw, invariant, ncols, col0))
        base[0] = col0

    def epilogue(region: TileRegion, i, fcv) -> None:
        lw.at.ip, lw.at.rows = i, sympy.Integer(kb.target.partitions)
        lw.at.fcv, lw.at.cols = fcv, sympy.Integer(lw.tp.fc)
        lw.vals = {mm: TVal("full", region)}
        epi_hoist.bind(lw, hoisted, base[0])
        lw.eval(accs={})

    def evict(ps, i, fcv) -> None:
        res = kb.tile((kb.target.partitions, lw.tp.fc), "float32", prefix="res")
        # VectorE transposes the lhs (rows_tr): ScalarE evicts (the same fp32 copy)
        kb.copy("scalar" if rows_tr else "vector", res.region(kb.target.partitions, lw.tp.fc),
                ps.region(kb.target.partitions, lw.tp.fc))
        epilogue(res.region(kb.target.partitions, lw.tp.fc), i, fcv)

    if whole_rhs:
        if whole:
            prologue(sympy.Integer(0), N)
        kstream.emit_rhs_resident(kb, M, N, K, in_dt, lhs_access, rhs_access, evict, lhs_rows=rows_tr)
    else:
        kstream.emit(kb, p, M, N, K, in_dt, lhs_tr, rhs_tr, lhs_access, rhs_access, epilogue,
                     prologue if per_block else None)
    if hoisted:
        kb.plan += f"; {len(hoisted)} row-invariant epilogue operand(s) loaded once per column block"
    return True


@register_lowering(aten.mm.default, aten.bmm.default, kind="kernel", epilogue=True)
def lower_mm(ctx: KernelContext, *args) -> None:
    """mm / bmm and the pointwise epilogue the partitioner fused after it (``ctx.group.nodes``);
    skinny ones (at most 8 rows per batch entry: decode GEMVs) have a plan of their own."""
    if lower_skinny(ctx.group, dict(ctx.sources), ctx.builder, dict(ctx.outputs), dict(ctx.out_meta), ctx.config):
        return
    lower_matmul(ctx.group, dict(ctx.sources), ctx.builder, dict(ctx.outputs), dict(ctx.out_meta), ctx.config)
