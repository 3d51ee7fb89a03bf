"""Regions of flat HBM tensors and the tile walk over them: the plan of data-movement phases.

A region is an (offset, sizes, strides) view of a flat HBM span, logical (``LRegion``, in elements
of a torch dtype; an int64 is a pair of int32 words) or hardware (``Region``, in hardware elements).
``plan_regions`` plans one phase over regions of equal sizes (a frozen ``loops.Walk``): size-1 dims dropped, dims every region
walks contiguously merged (``loops.merge``), the last merged dim the free axis (chunks of at most
``free_chunk`` elements), the largest other dim the partition axis (tiles of ``kb.target.partitions``
rows, ragged last tile), the rest outer loops; a lone long dim is split so many partitions work.
``walk_regions`` opens its loops and hands each tile iteration (``It``) to the phase's emitter.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import sympy
import torch.fx as fx

from ..ir import HBMAccess, HBMTensor, Tile
from .builder import KernelBuilder
from .layout import broadcast_strides, hw_dtype, word_scale
from .loops import Walk, largest_divisor, merge, split_axis, walk


@dataclass(frozen=True)
class LRegion:
    """A logical view (in logical elements) of a flat HBM tensor holding torch dtype ``dtype``."""

    tensor: HBMTensor
    dtype: str
    offset: int
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n

    def narrow(self, dim: int, start: int, length: int, step: int = 1) -> "LRegion":
        sizes, strides = list(self.sizes), list(self.strides)
        off = self.offset + start * strides[dim]
        sizes[dim], strides[dim] = length, strides[dim] * step
        return replace(self, offset=off, sizes=tuple(sizes), strides=tuple(strides))

    def select(self, dim: int, index: int) -> "LRegion":
        return replace(self, offset=self.offset + index * self.strides[dim],
                       sizes=self.sizes[:dim] + self.sizes[dim + 1:],
                       strides=self.strides[:dim] + self.strides[dim + 1:])

    def expand(self, sizes: Sequence[int]) -> "LRegion":
        st = broadcast_strides(self.sizes, self.strides, list(sizes))
        if st is None:
            raise NotImplementedError(f"cannot broadcast {list(self.sizes)} to {list(sizes)}")
        return replace(self, sizes=tuple(sizes), strides=tuple(st))

    def hw(self) -> "Region":
        """Hardware view; an int64 tensor gets a trailing (stride 1, count 2) word-pair dim."""
        if self.dtype == "int64":
            return Region(self.tensor, 2 * self.offset, self.sizes + (2,),
                          tuple(2 * s for s in self.strides) + (1,))
        return Region(self.tensor, self.offset, self.sizes, self.strides)

    def word(self, w: int) -> "Region":
        """Hardware view of word ``w`` (0 = low, 1 = high) of every element (int64 only)."""
        k = word_scale(self.dtype)
        return Region(self.tensor, k * self.offset + w, self.sizes, tuple(k * s for s in self.strides))


@dataclass(frozen=True)
class Region:
    """A hardware view: (offset, sizes, strides) in hardware elements of a flat HBM tensor."""

    tensor: HBMTensor
    offset: int
    sizes: tuple[int, ...]
    strides: tuple[int, ...]


def source_region(kb: KernelBuilder, src) -> LRegion:
    """The kernel parameter holding a ``Source`` and the value's logical view in it."""
    t = kb.param(src.host, src.base_extent * word_scale(src.base_dtype), hw_dtype(src.base_dtype))
    m = src.meta
    return LRegion(t, src.base_dtype, m.storage_offset, tuple(m.size), tuple(m.stride))


def output_region(out_tensors: dict, out_meta: dict, n: fx.Node) -> LRegion:
    m = out_meta[n]
    return LRegion(out_tensors[n], m.dtype, m.storage_offset, tuple(m.size), tuple(m.stride))



def _split_flat(dims: list[int], strides: list[list[int]], free_chunk: int, pmax: int) -> None:
    """A single long dim becomes [p, n/p] so the copy uses up to ``pmax`` partitions."""
    if len(dims) != 1 or dims[0] <= free_chunk:
        return
    n = dims[0]
    p = largest_divisor(n, pmax)
    if p > 1:
        dims[:] = [p, n // p]
        for st in strides:
            st[:] = split_axis(st, 0, n, p)


@dataclass
class It:
    """One tile iteration of a phase: per-region element offsets and partition/free strides."""

    offs: list[sympy.Expr]
    pstr: list[int]
    fstr: list[int]
    rows: sympy.Expr
    cols: sympy.Expr
    tile_rows: int
    tile_cols: int
    looped: bool

    def access(self, k: int, r: Region) -> HBMAccess:
        return HBMAccess(r.tensor, sympy.expand(r.offset + self.offs[k]),
                         ((self.pstr[k], self.rows), (self.fstr[k], self.cols)))


def phase_tile(kb: KernelBuilder, it: It, dtype: str, free_chunk: int, prefix: str) -> Tile:
    # a phase without loops allocates at kernel level: use one canonical shape so consecutive
    # loopless phases share (pooled) tiles instead of piling up SBUF
    shape = (it.tile_rows, it.tile_cols) if it.looped else (kb.target.partitions, free_chunk)
    return kb.tile(shape, dtype, prefix=prefix)


def plan_regions(sizes: Sequence[int], regions: Sequence[Region], free_chunk: int, pmax: int) -> Walk:
    """The walk of one phase over ``regions`` (equal ``sizes``): merged dims, the last one free
    (chunks of ``free_chunk``), the largest other one on partitions, the rest outer loops."""
    dims, strides = merge(sizes, [r.strides for r in regions])
    if not dims:
        dims, strides = [1], [[0] for _ in regions]
    _split_flat(dims, strides, free_chunk, pmax)
    F = len(dims) - 1
    P = max(range(F), key=lambda a: (dims[a], a)) if F > 0 else None
    return Walk(tuple(dims), tuple(tuple(st) for st in strides), tuple(a for a in range(F) if a != P), P, F,
                min(dims[F], free_chunk), pmax)


def walk_regions(kb: KernelBuilder, sizes: Sequence[int], regions: Sequence[Region], free_chunk: int,
                 body: Callable[[It], None]) -> None:
    """Call ``body`` once per tile of the joint iteration space of ``regions`` (same ``sizes``)."""
    for r in regions:
        assert tuple(r.sizes) == tuple(sizes), (r.sizes, sizes)
    w = plan_regions(sizes, regions, free_chunk, kb.target.partitions)
    with walk(kb, w) as at:
        body(It(list(at.offs), [st[w.P] if w.P is not None else 0 for st in w.strides],
                [st[w.F] for st in w.strides], at.rows, at.cols, min(w.psize, w.pmax), w.fc, w.looped))
    if kb.plan:
        kb.plan += "; "
    kb.plan += f"phase over {list(w.dims)} (partition {w.psize}, free {w.fsize} in chunks of {w.fc})"
