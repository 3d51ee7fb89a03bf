"""Which tile plans a fused group tries, best first (``emitter.lower_fused`` takes the first that
lowers)."""
from __future__ import annotations

import dataclasses

import torch

from .group import FusedGroup, col_pair, last_axis, reduce_dims
from ..layout import refine_domain
from ..registry import REDUCTIONS


def plan_variants(group: FusedGroup) -> list[tuple[FusedGroup, dict]]:
    """Tile plans to try, best first; the last one always applies.

    Sums over leading axes only keep the contiguous axis on the free side and sum over partitions
    (instead of reading the tensor transposed element by element); reductions over a middle axis
    keep the contiguous axis on the free side too and accumulate element-wise; elementwise groups iterate the
    common refinement of their members' shapes, so views that split an axis need no copy."""
    out: list[tuple[FusedGroup, dict]] = []
    R0 = frozenset(group.reduce_axes)
    if R0 and 0 not in group.domain and not group.col_axes \
            and last_axis(group.domain) not in R0 and col_pair(group.domain, frozenset(), R0) \
            and all(REDUCTIONS[n.target][0] == "add" and n.meta["val"].dtype.is_floating_point
                    for n in group.nodes if n.target in REDUCTIONS):
        out.append((group, dict(R0=set(), C0=set(R0))))
    if kept_free_fits(group):
        out.append((group, dict(kept_free=True)))
    if not group.reduce_axes and not group.col_axes:
        fine = refine_domain(group.domain, [n.meta["val"].shape for n in group.nodes
                                            if isinstance(n.meta.get("val"), torch.Tensor)])
        if fine != list(group.domain):
            out.append((dataclasses.replace(group, domain=tuple(fine)), {}))
    return out + [(group, {})]


#: the contiguous axis a reduction keeps must be at least this long to go on the free side, and the
#: other kept axes at least this many rows (fewer make many tiny instructions; the default plan wins)
KEPT_FREE_MIN = 32


def kept_free_shape(domain, R0: frozenset) -> bool:
    """``domain`` reduced over ``R0`` suits the kept-free plan: the last axis is kept and at least
    ``KEPT_FREE_MIN`` long, and another kept axis has at least ``KEPT_FREE_MIN`` rows."""
    last = last_axis(domain)
    rows = [s for i, s in enumerate(domain) if i not in R0 and i != last]
    return bool(R0) and 0 not in domain and last not in R0 and domain[last] >= KEPT_FREE_MIN \
        and max(rows, default=0) >= KEPT_FREE_MIN


def kept_free_fits(group: FusedGroup) -> bool:
    """Float sums, maxima or minima over the same axes, none of them the last one: accumulate
    element-wise with the contiguous axis on the free side (``kept_free_shape``)."""
    R0 = frozenset(group.reduce_axes)
    reds = [n for n in group.nodes if n.target in REDUCTIONS]
    if group.col_axes or not kept_free_shape(group.domain, R0):
        return False
    return all(REDUCTIONS[n.target][0] in ("add", "maximum", "minimum") and n.meta["val"].dtype.is_floating_point
               and frozenset(reduce_dims(n)[0]) == R0 for n in reds)
