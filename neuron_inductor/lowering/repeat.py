"""``repeat``: tile a tensor ``repeats[i]`` times along each dim, as one broadcast copy.

``x.repeat(r0, r1, ...)`` has output dim ``i`` of size ``r_i * s_i``. Seen as ``[r0, s0, r1, s1, ...]``
(each output dim split in two, a view of the contiguous output), the output is ``x`` broadcast
along the ``r_i`` dims: stride 0 on the source. So the whole op is one copy phase of
``indexing.copy_phase``, which merges contiguous dims into few large DMAs (loading the source
again for each repetition, the price of never holding the whole input on chip).
"""
from __future__ import annotations

import torch
import torch.fx as fx

from .builder import KernelBuilder
from .indexing import copy_phase, free_chunk_of
from .regions import LRegion, output_region, source_region
from .registry import KernelContext, register_lowering

aten = torch.ops.aten


def _split(region: LRegion, repeats: list[int], src_sizes: tuple[int, ...]) -> LRegion:
    """The output region ``[r_i * s_i]`` seen as ``[r0, s0, r1, s1, ...]``."""
    sizes, strides = [], []
    for r, s, st in zip(repeats, src_sizes, region.strides):
        sizes += [r, s]
        strides += [s * st, st]
    return LRegion(region.tensor, region.dtype, region.offset, tuple(sizes), tuple(strides))


@register_lowering(aten.repeat.default, kind="kernel")
def lower_repeat(ctx: KernelContext, *args) -> None:
    """out = x.repeat(repeats) (``len(repeats) >= x.dim()``; new dims lead)."""
    n, sources, kb, out_tensors, out_meta, cfg = ctx.unpack()
    xr = source_region(kb, sources[n.args[0]])
    repeats = [int(r) for r in n.args[1]]
    out = output_region(out_tensors, out_meta, n)
    lead = len(repeats) - len(xr.sizes)
    if lead < 0:
        raise NotImplementedError("repeat with fewer repeats than dims")
    src_sizes = (1,) * lead + tuple(xr.sizes)
    src_strides = (0,) * lead + tuple(xr.strides)
    dst = _split(out, repeats, src_sizes)
    src = LRegion(xr.tensor, xr.dtype, xr.offset,
                  tuple(v for s in src_sizes for v in (1, s)),
                  tuple(v for st in src_strides for v in (0, st)))
    kb.plan = f"repeat {repeats} of {list(xr.sizes)}: one broadcast copy"
    copy_phase(kb, dst, src.expand(dst.sizes), free_chunk_of(cfg))
