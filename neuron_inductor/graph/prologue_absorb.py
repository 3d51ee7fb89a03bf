"""Fold the fused group that computes a GEMM's lhs (an RMSNorm before a projection) into the GEMM's
group: a partitioner post-pass.

Separately, the norm kernel writes its ``[M, K]`` result to HBM and the GEMM reads it back (NKIBench
rmsnorm_matmul: 0.2 ms of a 1.1 ms program on trn1). Folded, the fused group's own plan (whole rows,
row tiles on partitions, ``lowering/matmul/prologue.py``) drives the kernel and each finished row
tile of the lhs is transposed and multiplied against the resident rhs where it would have been
stored. The values computed are the same ops on the same inputs in the same order, so numerics are
unchanged. Lowering refuses the folded group where that plan does not apply (then the two groups
are lowered as before, ``lowering.groups.unmerge``).
"""
from __future__ import annotations

import math

import torch

from ..lowering.groups import GroupDraft, view_root
from ..lowering.registry import VIEWS
from .epilogue_absorb import joins_directly

aten = torch.ops.aten


def _lhs_producer(p, m: GroupDraft, f: GroupDraft) -> bool:
    """Fused group ``f`` computes matmul group ``m``'s lhs row by row and nothing else of ``m``
    depends on ``f`` (``p``: the partitioner). The lhs may have other readers (saved for the
    backward's weight gradient): the folded kernel then also stores it."""
    mms = [n for n in m.nodes if n.target not in VIEWS]
    if f.kind != "fused" or f.col_axes or len(mms) != 1 or mms[0].target is not aten.mm.default:
        return False
    mm = mms[0]
    a, b = mm.args[0], mm.args[1]
    if a not in f.members or view_root(b) in f.members:
        return False
    M, K = (int(s) for s in a.meta["val"].shape)
    last = len(f.domain) - 1
    if not f.domain or int(f.domain[-1]) != K or math.prod(f.domain) != M * K or \
            any(ax != last for ax in f.reduce_axes) or a.meta["val"].stride() != (K, 1):
        return False
    if any(n.target is aten.copy_.default for n in f.nodes):
        return False
    return joins_directly(p.dag, f, m)  # m reads f only through its lhs


def absorb_into_prologues(p) -> None:
    """Fold every fused group computing a GEMM's lhs into that GEMM's matmul group (``p``: the
    partitioner, whose groups, ``group_of`` and group DAG are updated in place)."""
    for m in [g for g in p.groups if g.kind == "matmul" and not g.reduce_axes]:
        mm = next((n for n in m.nodes if n.target is aten.mm.default), None)
        f = p.group_of.get(mm.args[0]) if mm is not None else None
        if f is not None and f is not m and f in p.groups and _lhs_producer(p, m, f):
            p.fold(m, f)
