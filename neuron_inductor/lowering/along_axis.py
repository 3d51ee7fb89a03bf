"""Walk a tensor as rows x one chosen axis: the tile plan of ops that work *along* an axis.

A scan or a reversal along ``axis`` needs every element of that axis in one partition, in order, on
the free axis of a tile. The other dims are the rows: size-1 dims are dropped, dims that every
region walks contiguously are merged, the largest merged dim goes on partitions (tiles of 128 rows,
ragged last tile) and the rest become outer loops. The chosen axis is cut into chunks of at most
``chunk`` elements, walked in order (``sequential``) when a chunk depends on the previous one.

The regions are hardware views (``regions.Region``) with the same logical sizes; a non-unit stride
along ``axis`` is a strided DMA, which is legal but slower than a contiguous one. A region may walk
a row dim backwards (negative stride: a reversed view); such dims become outer loops.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import sympy

from ..ir import HBMAccess
from .builder import KernelBuilder, ceil_div
from .loops import Walk, maybe_loop, merge, ragged, walk
from .regions import Region


@dataclass
class Chunk:
    """One [rows, cols] tile of the walk: chunk ``var`` of the axis in row tile ``row``."""

    row: "Rows"
    var: sympy.Expr
    cols: sympy.Expr
    #: first element along the axis
    start: sympy.Expr

    def access(self, k: int, start: sympy.Expr | None = None, cols: sympy.Expr | None = None) -> HBMAccess:
        """Region ``k`` at [row tile, axis elements start : start + cols] (this chunk by default)."""
        r = self.row.regions[k]
        s = self.start if start is None else start
        n = self.cols if cols is None else cols
        off = r.offset + self.row.offs[k] + r.strides[self.row.axis] * s
        return HBMAccess(r.tensor, sympy.expand(off), ((self.row.pstr[k], self.row.rows),
                                                        (r.strides[self.row.axis], n)))


@dataclass
class Rows:
    """One row tile: ``rows`` partitions (``tile_rows`` allocated) of every region."""

    kb: KernelBuilder
    regions: Sequence[Region]
    axis: int
    length: int
    chunk: int
    offs: list[sympy.Expr]
    pstr: list[int]
    rows: sympy.Expr
    tile_rows: int

    @property
    def n_chunks(self) -> int:
        return ceil_div(self.length, self.chunk)

    @contextlib.contextmanager
    def chunks(self, kind: str = "affine") -> Iterator[Chunk]:
        """The chunks of the axis, in a loop of ``kind`` (``sequential`` when one carries into the next)."""
        with maybe_loop(self.kb, self.n_chunks, kind, "c") as jc:
            yield Chunk(self, jc, ragged(self.length, self.chunk, jc), self.chunk * jc)


def walk_rows(kb: KernelBuilder, sizes: Sequence[int], axis: int, regions: Sequence[Region], chunk: int,
              body: Callable[[Rows], None]) -> None:
    """Call ``body`` once per row tile of ``regions`` (equal logical ``sizes``) seen as rows x ``axis``."""
    for r in regions:
        assert tuple(r.sizes) == tuple(sizes), (r.sizes, sizes)
    rest = [i for i in range(len(sizes)) if i != axis]
    dims, strides = merge([sizes[i] for i in rest], [[r.strides[i] for i in rest] for r in regions])
    # a dim some region walks backwards (negative stride) stays an outer loop: access patterns walk
    # forward only, a loop variable's offset may go down
    forward = [a for a in range(len(dims)) if all(st[a] >= 0 for st in strides)]
    if not forward:
        dims, strides = dims + [1], [st + [0] for st in strides]
        forward = [len(dims) - 1]
    P = max(forward, key=lambda a: (dims[a], a))
    outer = [a for a in range(len(dims)) if a != P]
    Ps = dims[P]
    length = int(sizes[axis])
    chunk = max(1, min(length, chunk))

    pmax = kb.target.partitions
    w = Walk(tuple(dims), tuple(tuple(st) for st in strides), tuple(outer), P, None, 1, pmax)
    with walk(kb, w, chunks=False) as at:
        body(Rows(kb, regions, axis, length, chunk, list(at.offs), [st[P] for st in strides], at.rows,
                  min(Ps, pmax)))
    if kb.plan:
        kb.plan += "; "
    kb.plan += (f"rows {dims} ({Ps} on partitions in tiles of {pmax}) x axis {axis} of {length} on the free "
                f"axis in chunks of {chunk}")
