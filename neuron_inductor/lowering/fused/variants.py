"""Which tile plans a fused group tries, best first (``emitter.lower_fused`` takes the first that
lowers)."""
from __future__ import annotations

import dataclasses

import torch

from .group import FusedGroup, col_pair, last_axis
from ..layout import refine_domain
from ..registry import REDUCTIONS


def plan_variants(group: FusedGroup) -> list[tuple[FusedGroup, dict]]:
    """Tile plans to try, best first; the last one always applies.

    Sums over leading axes only keep the contiguous axis on the free side and sum over partitions
    (instead of reading the tensor transposed element by element); elementwise groups iterate the
    common refinement of their members' shapes, so views that split an axis need no copy."""
    out: list[tuple[FusedGroup, dict]] = []
    R0 = frozenset(group.reduce_axes)
    if R0 and 0 not in group.domain and not group.col_axes \
            and last_axis(group.domain) not in R0 and col_pair(group.domain, frozenset(), R0) \
            and all(REDUCTIONS[n.target][0] == "add" and n.meta["val"].dtype.is_floating_point
                    for n in group.nodes if n.target in REDUCTIONS):
        out.append((group, dict(R0=set(), C0=set(R0))))
    if not group.reduce_axes and not group.col_axes:
        fine = refine_domain(group.domain, [n.meta["val"].shape for n in group.nodes
                                            if isinstance(n.meta.get("val"), torch.Tensor)])
        if fine != list(group.domain):
            out.append((dataclasses.replace(group, domain=tuple(fine)), {}))
    return out + [(group, {})]
