"""Matmul kernels: ``mm``/``bmm`` on TensorE with the pointwise epilogue fused.

Tile plan (nki.md §6.1): output tiles of 128 rows (the stationary operand's free size) by 512
columns (one PSUM bank of fp32), the contraction axis on partitions in 128-deep steps accumulated in
PSUM. Operands are read through access patterns, so a transposed or permuted operand costs no copy
kernel. The PSUM tile is evicted to SBUF once and the epilogue (bias, activation, residual add, cast)
runs on it before the single store.
"""
from __future__ import annotations

import sympy
import torch
import torch.fx as fx

from ..config import Config
from ..ir import HBMAccess
from .builder import KernelBuilder, TVal, ceil_div
from .fused import PMAX, FusedGroup, Source, _Ctx, _FusedLowering
from .layout import LoweringError, hw_dtype, word_scale
from .registry import register_kernel

aten = torch.ops.aten
NMAX = 512
KMAX = 128


def _operand(kb: KernelBuilder, src: Source, batch_vars, batch_axes_strides, row_ax: int,
             col_ax: int, row0, rows, col0, cols):
    """Access [rows over ``row_ax``, cols over ``col_ax``] of an operand (logical axes)."""
    m = src.meta
    scale = word_scale(src.base_dtype)
    if scale != 1:
        raise LoweringError("integer matmul operands")
    param = kb.param(src.host, src.base_extent, hw_dtype(src.base_dtype))
    off = m.storage_offset + row0 * m.stride[row_ax] + col0 * m.stride[col_ax]
    for v, st in zip(batch_vars, batch_axes_strides):
        off += v * st
    return HBMAccess(param, sympy.expand(off), ((m.stride[row_ax], rows), (m.stride[col_ax], cols)))


def lower_matmul(group: FusedGroup, sources: dict[fx.Node, Source], kb: KernelBuilder,
                 out_tensors: dict, out_meta: dict, cfg: Config) -> None:
    mm = next(n for n in group.nodes if n.target in (aten.mm.default, aten.bmm.default))
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
    D = out_shape
    lw = _FusedLowering(FusedGroup(group.nodes, group.outputs, tuple(D)), sources, kb, NMAX)
    lw.out_tensors, lw.out_meta = out_tensors, out_meta
    lw.seeded = {mm}
    lw.plan(merge=False)
    lw.P, lw.F = nb, nb + 1
    lw.p_reduced, lw.accumulate = False, False
    lw.fc_size = lw.fc = min(N, NMAX)
    lw.loop_vars = {}
    lw.ctx = _Ctx(lw)
    in_dt = hw_dtype(sa.base_dtype)
    nm, nn, nk = ceil_div(M, PMAX), ceil_div(N, NMAX), ceil_div(K, KMAX)
    kb.plan = (f"matmul [{'x'.join(map(str, out_shape[:-2])) or '-'}] {M}x{K} @ {K}x{N} ({in_dt}); "
               f"output tiles {PMAX}x{lw.fc} in PSUM, K in {nk} step(s) of {KMAX} accumulated in PSUM; "
               f"epilogue: {len(group.nodes) - 1} fused op(s)")

    def batch_loops(k: int, bvars: list):
        if k < nb:
            with lw._loop(D[k], "affine", "b") as v:
                lw.loop_vars[k] = v
                batch_loops(k + 1, bvars + [v])
            return
        tiles(bvars)

    def bstrides(meta, rank_out: int):
        # batch strides of a bmm operand (broadcast batch dims have stride 0)
        return [meta.stride[i] if meta.size[i] != 1 else 0 for i in range(len(meta.size) - 2)]

    def tiles(bvars):
        with lw._loop(nm, "affine", "m") as im:
            lw.ip = im
            rows = sympy.Min(PMAX, M - PMAX * im) if (M % PMAX and nm > 1) else sympy.Integer(min(M, PMAX))
            lw.rows = rows
            with lw._loop(nn, "affine", "n") as jn:
                lw.fcv = jn
                cols = sympy.Min(NMAX, N - NMAX * jn) if (N % NMAX and nn > 1) else sympy.Integer(min(N, NMAX))
                lw.cols = cols
                acc = kb.tile((PMAX, lw.fc), "float32", "psum", prefix="acc")
                accr = acc.region(rows, cols)
                with lw._loop(nk, "affine", "k") as kk:
                    krows = sympy.Min(KMAX, K - KMAX * kk) if (K % KMAX and nk > 1) else sympy.Integer(min(K, KMAX))
                    lhs_t = kb.tile((KMAX, PMAX), in_dt, prefix="lhsT")
                    rhs_t = kb.tile((KMAX, lw.fc), in_dt, prefix="rhs")
                    ra, rb = a.meta["val"].dim(), b.meta["val"].dim()
                    kb.dma(lhs_t.region(krows, rows),
                           _operand(kb, sa, bvars, bstrides(sa.meta, ra), ra - 1, ra - 2,
                                    KMAX * kk, krows, PMAX * im, rows))
                    kb.dma(rhs_t.region(krows, cols),
                           _operand(kb, sb, bvars, bstrides(sb.meta, rb), rb - 2, rb - 1,
                                    KMAX * kk, krows, NMAX * jn, cols))
                    kb.instr("tensor", "nc_matmul", accr,
                             {"stationary": lhs_t.region(krows, rows), "moving": rhs_t.region(krows, cols)},
                             accumulate=(sympy.Gt(kk, 0) if nk > 1 else False))
                res = kb.tile((PMAX, lw.fc), "float32", prefix="res")
                resr = res.region(rows, cols)
                kb.instr("vector", "tensor_copy", resr, {"src": accr})
                lw.vals = {mm: TVal("full", resr)}
                lw._eval(accs={})

    batch_loops(0, [])


@register_kernel(aten.mm.default, aten.bmm.default)
def _matmul_group_only(*args, **kwargs):  # pragma: no cover - matmuls are lowered as groups
    raise LoweringError("matmul is lowered through its group")
