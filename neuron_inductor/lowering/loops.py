"""Loop nests over tiles, shared by every lowering that walks a tensor in [rows, cols] tiles.

A lowering's tile plan names a few axes: outer loops, a partition axis cut into tiles of
``kb.target.partitions`` rows, a free axis cut into chunks. Opening those loops, computing the
extent of the ragged last tile and reshaping a flat span so more partitions work are the same
everywhere (fused groups, gathers and scatters, scans, reversals, the matmul epilogue), so they
live here once:

* :func:`maybe_loop` opens a loop, or none when the extent is 1 (the variable is then 0: no
  single-iteration loops in the generated kernels);
* :func:`nest` opens one such loop per axis, outermost first;
* :func:`tiles` walks ``total`` elements in steps of ``step`` and gives each step's extent
  (:func:`ragged`: the full step, or what is left in the last one);
* :func:`merge` drops size-1 dims and merges neighbours every access walks contiguously;
* :func:`largest_divisor` and :func:`split_axis` turn one long axis into ``[rows, n / rows]``;
* :class:`Walk` is the frozen tile plan of a walk over several accesses (merged dims, outer axes,
  partition axis, free axis and its chunk) and :func:`walk` opens its loops, yielding the loop
  state of each tile (:class:`At`). Data-movement phases, scans and reversals plan a ``Walk`` and
  emit inside it; fused kernels have a richer plan of their own (``fused/tiling.py``: ``TilePlan``).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Sequence

import sympy

from .builder import KernelBuilder, ceil_div


@contextlib.contextmanager
def maybe_loop(kb: KernelBuilder, extent: int, kind: str = "affine", prefix: str = "i") -> Iterator[sympy.Expr]:
    """A loop of ``extent`` iterations (its variable), or none at all (0) when ``extent`` is 1."""
    if extent == 1:
        yield sympy.Integer(0)
    else:
        with kb.loop(extent, kind, prefix) as v:
            yield v


@contextlib.contextmanager
def nest(kb: KernelBuilder, extents: Sequence[int], kind: str = "affine",
         prefix: str = "l") -> Iterator[list[sympy.Expr]]:
    """Loops over ``extents``, the first outermost; yields their variables in the same order."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(maybe_loop(kb, e, kind, prefix)) for e in extents]


def ragged(total: int, step: int, var: sympy.Expr) -> sympy.Expr:
    """Extent of step ``var`` when ``total`` elements are walked in steps of ``step``: ``step``,
    except in a ragged last step (``total`` when one step covers everything)."""
    if total <= step:
        return sympy.Integer(total)
    if total % step == 0:
        return sympy.Integer(step)
    return sympy.Min(step, total - step * var)


@contextlib.contextmanager
def tiles(kb: KernelBuilder, total: int, step: int, kind: str = "affine",
          prefix: str = "p") -> Iterator[tuple[sympy.Expr, sympy.Expr]]:
    """One loop over the ``ceil(total / step)`` steps of an axis: (step variable, its extent)."""
    with maybe_loop(kb, ceil_div(total, step), kind, prefix) as v:
        yield v, ragged(total, step, v)


def offsets(strides: Sequence[Sequence[int]], axes: Sequence[int], variables: Sequence[sympy.Expr],
            base: Sequence[sympy.Expr] | None = None) -> list[sympy.Expr]:
    """Per access, ``base + sum(stride[axis] * var)`` over the looped ``axes``."""
    out = []
    for k, st in enumerate(strides):
        e = base[k] if base is not None else sympy.Integer(0)
        for a, v in zip(axes, variables):
            e = e + st[a] * v
        out.append(e)
    return out


def merge(sizes: Sequence[int], strides_list: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and merge neighbours that every access walks contiguously (row-major)."""
    keep = [i for i, s in enumerate(sizes) if s != 1]
    dims: list[int] = []
    out: list[list[int]] = [[] for _ in strides_list]
    for i in keep:
        if dims and all(st[-1] == src[i] * sizes[i] for st, src in zip(out, strides_list)):
            dims[-1] *= sizes[i]
            for st, src in zip(out, strides_list):
                st[-1] = src[i]
            continue
        dims.append(sizes[i])
        for st, src in zip(out, strides_list):
            st.append(src[i])
    return dims, out


def largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of ``n`` not above ``limit`` (1 when there is none above 1)."""
    return next((d for d in range(min(limit, n), 1, -1) if n % d == 0), 1)


def split_axis(strides: Sequence[int], axis: int, n: int, rows: int) -> list[int]:
    """Strides of an access after axis ``axis`` (extent ``n``) becomes ``[rows, n // rows]``, the
    other axes dropped: the flat span seen as rows of ``n // rows`` elements."""
    s = strides[axis]
    return [s * (n // rows), s]


@dataclass(frozen=True)
class Walk:
    """The tile plan of a walk over accesses of equal logical size: the (merged) ``dims``, each
    access's ``strides`` along them, the ``outer`` loop axes, the partition axis ``P`` (tiles of
    ``pmax`` rows; None: one row) and the free axis ``F`` (chunks of ``fc``; None: one column)."""

    dims: tuple[int, ...]
    strides: tuple[tuple[int, ...], ...]
    outer: tuple[int, ...]
    P: int | None
    F: int | None
    fc: int
    pmax: int

    @property
    def psize(self) -> int:
        return self.dims[self.P] if self.P is not None else 1

    @property
    def fsize(self) -> int:
        return self.dims[self.F] if self.F is not None else 1

    @property
    def looped(self) -> bool:
        """Some loop has more than one iteration (tiles are then allocated inside the loops)."""
        return any(self.dims[a] > 1 for a in self.outer) or self.psize > self.pmax or self.fsize > self.fc


@dataclass(frozen=True)
class At:
    """Loop state of one tile of a :class:`Walk`: each access's offset of the tile's first element,
    the row-tile and chunk variables and the tile's extents (ragged in a last tile)."""

    offs: tuple[sympy.Expr, ...]
    ip: sympy.Expr
    rows: sympy.Expr
    jf: sympy.Expr
    cols: sympy.Expr


@contextlib.contextmanager
def walk(kb: KernelBuilder, w: Walk, kind: str = "affine", chunks: bool = True) -> Iterator[At]:
    """Open ``w``'s loops (outer, row tiles and, with ``chunks``, free-axis chunks) and yield the
    state of the tile they address. Without ``chunks`` the free axis is left to the caller."""
    with nest(kb, [w.dims[a] for a in w.outer], kind, "l") as lv, \
            tiles(kb, w.psize, w.pmax, kind, "p") as (ip, rows):
        offs = offsets(w.strides, w.outer, lv)
        if w.P is not None:
            offs = [o + st[w.P] * w.pmax * ip for o, st in zip(offs, w.strides)]
        if not chunks or w.F is None:
            yield At(tuple(offs), ip, rows, sympy.Integer(0), sympy.Integer(w.fsize if chunks else 1))
            return
        with tiles(kb, w.fsize, w.fc, kind, "f") as (jf, cols):
            yield At(tuple(o + st[w.F] * w.fc * jf for o, st in zip(offs, w.strides)), ip, rows, jf, cols)
