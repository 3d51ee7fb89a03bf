"""Prefix sums of 0/1 tensors as a matmul with a triangular ones matrix (TensorE), exactly.

``cumsum`` of a bool tensor counts: transformers' packed-sequence detection numbers the documents
of a packed row with ``(diff(position_ids) != 1).cumsum(-1)``, and position ids are built from
``attention_mask.cumsum(-1)`` for bool masks. Along an axis of length L, ``cumsum(x) = x @ U`` with
``U[i, j] = (i <= j)``: one [rows, L] x [L, L] matmul. With 0/1 inputs every product is 0 or 1 and
every partial sum an integer <= L, which fp32 holds exactly for L <= 2**24, so the result is exact
whatever the summation order. Float and general integer inputs are left alone (``NotImplemented``):
their sums are not exact in fp32.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

#: longest axis whose counts fp32 holds exactly
MAX_EXACT = 1 << 24


def cumsum(x: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None):
    if x.dtype not in (torch.bool, torch.uint8) or x.dim() == 0:
        return NotImplemented
    dim = dim % x.dim()
    n = x.shape[dim]
    if n == 0 or n > MAX_EXACT or x.numel() == 0:
        return NotImplemented
    out_dtype = dtype or torch.int64  # torch promotes bool / uint8 sums to int64
    moved = torch.movedim(x, dim, -1)
    rows = moved.reshape(-1, n).to(torch.float32)
    idx = torch.arange(n, device=x.device)
    upper = (idx.unsqueeze(1) <= idx.unsqueeze(0)).to(torch.float32)
    out = torch.mm(rows, upper).reshape(moved.shape)
    return torch.movedim(out, -1, dim).to(out_dtype).contiguous()


DECOMPOSITIONS = {aten.cumsum.default: cumsum}
