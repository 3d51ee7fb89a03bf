"""``flip``: reverse a tensor along its dims, one flipped dim at a time, with ``nisa.nc_n_gather``.

DMA access patterns walk forward only (the NKI docs give no negative stride), so the reversal
happens on chip: the flipped dim lies on the free axis of a tile (``along_axis.walk_rows``), a
chunk of it is loaded in order and ``nc_n_gather`` (GpSimd, a bit-exact move inside each
partition) reads it back through the index tile ``C-1, C-2, ..., 0`` made once by ``iota``.

Output chunk ``j`` holds input elements ``[L - jC - cols, L - jC)``. They are loaded right-aligned
in the ``C``-column tile (at column ``C - cols``), so the same index tile reverses full and
ragged chunks alike. An int64 tensor is flipped word by word (low words, then high words). Other
flipped dims are walked backwards as outer loops of the source (a loop variable's offset may
decrease; the access pattern itself still walks forward).
"""
from __future__ import annotations

from dataclasses import replace

import torch
import torch.fx as fx

from ..ir import TileRegion
from .along_axis import Chunk, Rows, walk_rows
from .builder import KernelBuilder
from .indexing import copy_phase, free_chunk_of, norm_dim
from .regions import LRegion, output_region, source_region
from .layout import word_scale
from .registry import KernelContext, register_lowering

aten = torch.ops.aten


def flip_phase(kb: KernelBuilder, dst: LRegion, src: LRegion, dim: int, chunk: int) -> None:
    """``dst = src.flip(dim)`` (equal sizes and dtypes)."""
    length = dst.sizes[dim]
    C = max(1, min(length, chunk))
    idx = kb.tile((kb.target.partitions, C), "uint32", prefix="rev")
    kb.iota(idx.full(), pattern=[[-1, C]], offset=C - 1, channel_multiplier=0)
    for w in range(word_scale(dst.dtype)):
        d, s = dst.word(w), src.word(w)

        def rows_body(rw: Rows) -> None:
            with rw.chunks() as ch:
                reverse_chunk(rw, ch)

        def reverse_chunk(rw: Rows, ch: Chunk) -> None:
            hw = d.tensor.dtype
            t = kb.tile((rw.tile_rows, C), hw, prefix="fwd")
            kb.dma(TileRegion(t, (0, C - ch.cols), (rw.rows, ch.cols)),
                   ch.access(1, start=length - ch.start - ch.cols))
            r = kb.tile((rw.tile_rows, C), hw, prefix="bwd").region(rw.rows, ch.cols)
            kb.nc_n_gather(r, data=t.region(rw.rows, C), indices=idx.region(rw.rows, ch.cols))
            kb.dma(ch.access(0), r)

        walk_rows(kb, d.sizes, dim, [d, s], C, rows_body)


@register_lowering(aten.flip.default, kind="kernel")
def lower_flip(ctx: KernelContext, x: fx.Node, dims: list[int]) -> None:
    """out = x.flip(dims)."""
    n, sources, kb, out_tensors, out_meta, cfg = ctx.unpack()
    xr = source_region(kb, sources[x])
    out = output_region(out_tensors, out_meta, n)
    rank = len(xr.sizes)
    dims = sorted({norm_dim(d, rank) for d in dims})
    dims = [d for d in dims if xr.sizes[d] > 1]  # reversing one element is a copy
    kb.plan = f"flip dims {dims} with nc_n_gather"
    if not dims:
        copy_phase(kb, out, xr, free_chunk_of(cfg))
        return
    # the last flipped dim is reversed on chip; the others by walking the source backwards
    src = xr
    for d in dims[:-1]:
        src = replace(src, offset=src.offset + (src.sizes[d] - 1) * src.strides[d],
                      strides=tuple(-st if i == d else st for i, st in enumerate(src.strides)))
    flip_phase(kb, out, src, dims[-1], free_chunk_of(cfg))
