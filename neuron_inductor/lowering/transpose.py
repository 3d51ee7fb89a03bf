"""``dst = src^T`` for the lowerings that transpose float data through TensorE.

On NeuronCore-v2 (trn1) "Tensor Engine transpose is not bit-accurate if the input data contains
NaN/Inf" (aws-neuron-sdk ``nki/api/nki/isa/__init__.py`` nc_transpose; "Starting NeuronCore-v3, all
Tensor Engine transpose is bit-accurate"), and user data, masks and running maxima can hold them.
There the transpose runs on VectorE, whose ``nc_transpose`` the docs limit to [32, 32] tiles and
allow to read and write SBUF or PSUM with no accuracy caveat: a grid of 32 x 32 blocks. A ragged
(symbolic) extent ``e <= 128`` is covered by four windows of ``min(32, e)`` elements starting at
``min(32 i, max(e - 32, 0))``: every window lies inside ``[0, e)`` and together they cover it (the
last ones may rewrite the same elements with the same values). Later generations keep the one
TensorE instruction.
"""
from __future__ import annotations

import sympy

from ..ir import TileRegion

#: VectorE ``nc_transpose`` tile limit ("Vector Engine can handle shape [32, 32] or smaller")
VBLOCK = 32
#: TensorE transposes here are at most [128, 128] ("[128, 128] or smaller")
TMAX = 128


def _windows(extent) -> list[tuple]:
    """(offset, size) windows of at most VBLOCK covering ``[0, extent)``."""
    e = sympy.sympify(extent)
    if e.is_Integer:
        n = int(e)
        return [(i, min(VBLOCK, n - i)) for i in range(0, n, VBLOCK)]
    size = sympy.Min(VBLOCK, e)
    return [(sympy.Min(VBLOCK * i, sympy.Max(e - VBLOCK, 0)), size) for i in range(TMAX // VBLOCK)]


def tensor_transpose_exact(target, dtype: str) -> bool:
    """A TensorE transpose of ``dtype`` data is bit-exact on ``target`` whatever the values."""
    return target.nc_version > 2 or "int" in dtype


def tensor_transpose(kb, dst: TileRegion, src: TileRegion) -> None:
    """``dst[F, P] = src[P, F]``: one TensorE ``nc_transpose``, or VectorE 32 x 32 blocks on
    NeuronCore-v2 (bit-exact with NaN/Inf; ``dst`` may then be SBUF or PSUM)."""
    if tensor_transpose_exact(kb.target, src.dtype):
        kb.nc_transpose(dst, data=src, engine="tensor")
        return
    (sp, sf), (dp, df) = src.starts, dst.starts
    for po, pn in _windows(src.sizes[0]):
        for fo, fn in _windows(src.sizes[1]):
            kb.nc_transpose(TileRegion(dst.tile, (dp + fo, df + po), (fn, pn)), data=TileRegion(src.tile, (sp + po, sf + fo), (pn, fn)), engine="vector")
