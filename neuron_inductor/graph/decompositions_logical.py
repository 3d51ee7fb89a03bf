"""``any`` / ``all`` of non-bool tensors as the same reduction over ``x != 0``.

The lowering reduces ``any`` with ``maximum`` and ``all`` with ``minimum``, which is right only for
0/1 values: ``any([-5, 0])`` is ``max = 0`` (False), and a uint8 result (torch keeps uint8 for uint8
inputs) must hold 0/1, not the maximum itself. Testing ``x != 0`` first makes every input 0/1
(NaN != 0 is True, as torch's ``any`` counts NaN); a uint8 input gets its uint8 result back.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

DECOMPOSITIONS: dict = {}


def _on_nonzero(op):
    def decomposition(x: torch.Tensor, *args, **kwargs):
        if x.dtype == torch.bool:
            return NotImplemented
        r = op(aten.ne.Scalar(x, 0), *args, **kwargs)
        return aten._to_copy.default(r, dtype=torch.uint8) if x.dtype == torch.uint8 else r
    return decomposition


for _op in (aten.any.default, aten.any.dim, aten.any.dims, aten.all.default, aten.all.dim, aten.all.dims):
    DECOMPOSITIONS[_op] = _on_nonzero(_op)
