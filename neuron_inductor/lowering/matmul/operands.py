"""How a GEMM kernel addresses its operands in HBM: logical row / column blocks through access patterns.

Shared by every GEMM lowering of the package (``gemm``, ``emitter``, ``multi``): a transposed or
permuted operand is read through its strides, so it costs no copy kernel.
"""
from __future__ import annotations

import sympy

from ...ir import HBMAccess
from ..builder import KernelBuilder
from ..fused.group import Source
from ..layout import LoweringError, hw_dtype, word_scale


def operand_access(kb: KernelBuilder, src: Source, batch_vars, batch_axes_strides, row_ax: int,
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


def batch_strides(meta) -> list[int]:
    """Batch strides of a bmm operand (broadcast batch dims have stride 0)."""
    return [meta.stride[i] if meta.size[i] != 1 else 0 for i in range(len(meta.size) - 2)]
