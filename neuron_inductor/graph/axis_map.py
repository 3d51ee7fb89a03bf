"""Which axis of a fused group's domain each dim of a reduced-space value stands for.

A fused group with a reduction computes values of the reduced space ([3, 513] or [3, 1, 513] for a
sum over axis 1 of a [3, 3, 513] domain) as tiles indexed by the domain's kept axes, and a reader
anywhere in the group sees such a value at the kept axes of its own position. That is the value
PyTorch means only when the reader's broadcast puts each dim of the value on the axis it came from:
right-aligned broadcasting of [3, 513] over [3, 3, 513] puts its dims on axes (1, 2), not (0, 2),
and a view chain (``view`` to the kept shape, ``unsqueeze`` at another axis, ``expand``) can move
dims too. :func:`aligned` follows the chain from the member and compares. Dims of size 1 broadcast
and never misplace a value; a view that merges or splits dims is not followed (the read is refused,
which costs a fusion, never a wrong number).
"""
from __future__ import annotations

from typing import Callable, Sequence

import math

import torch
import torch.fx as fx

from ..lowering.groups import val

aten = torch.ops.aten
Axes = list  # per dim: the domain axis it stands for, or None (a broadcast or unit dim)


def _shape(n: fx.Node) -> list[int] | None:
    v = val(n)
    return [int(s) for s in v.shape] if isinstance(v, torch.Tensor) else None


def reduced_shapes(domain: Sequence[int], axes: frozenset) -> list[list[int]]:
    """The shapes of a value of the reduced space: without the reduced dims, and with them as 1."""
    kept = [s for i, s in enumerate(domain) if i not in axes]
    keep1 = [1 if i in axes else s for i, s in enumerate(domain)]
    return [kept, keep1]


def space_axes(shape: Sequence[int], domain: Sequence[int], reduce_axes: frozenset) -> Axes | None:
    """The domain axis of each dim of a value of the group's own shapes: the domain itself, or the
    reduced shape with unit dims (identity; a unit dim stands for nothing), the reduced shape
    without them (the kept axes), or another shape of the domain's size, which the group holds as
    the domain flattened: that is a dim-for-dim map only when the two agree once unit dims are
    dropped. None otherwise (the value's dims stand for no single domain axis each)."""
    shape, D = [int(s) for s in shape], len(domain)
    if len(shape) == D and all(s in (d, 1) for s, d in zip(shape, domain)):
        return list(range(D))
    kept = [i for i in range(D) if i not in reduce_axes]
    if shape == [domain[i] for i in kept]:
        return kept
    if math.prod(shape) != math.prod(domain):
        return None
    real = [i for i in range(D) if domain[i] != 1]
    if [s for s in shape if s != 1] != [domain[i] for i in real]:
        return None  # e.g. [7, 3, 3, 513] over a [7, 1, 3, 513, 3] domain: the 3s are other axes
    it = iter(real)
    return [None if s == 1 else next(it) for s in shape]


def through_view(v: fx.Node, axes: Axes) -> Axes | None:
    """``axes`` of ``v.args[0]`` carried through the view ``v``; None when ``v`` moves data between
    dims (a reshape merging or splitting dims) and so is not followed."""
    src, out = _shape(v.args[0]), _shape(v)
    if v.target is aten.expand.default:
        lead = len(out) - len(src)
        return [None] * lead + [ax if src[i] == out[lead + i] else None for i, ax in enumerate(axes)]
    kept = [(s, ax) for s, ax in zip(src, axes) if s != 1]
    if [s for s in out if s != 1] != [s for s, _ in kept]:
        return None
    it = iter(kept)
    return [None if s == 1 else next(it)[1] for s in out]


def aligned(n: fx.Node, members: set, through: Callable[[fx.Node], bool], domain: Sequence[int],
            reduce_axes: frozenset, reduction: bool = False) -> bool:
    """Every reduced-space member ``n`` reads (directly or through views ``through`` accepts) lands,
    after ``n``'s right-aligned broadcast, on the domain axes it stands for. A ``reduction`` reads
    its input over the whole domain."""
    if not reduce_axes:
        return True
    size = math.prod(domain)
    reduced = reduced_shapes(domain, reduce_axes)
    shape = _shape(n)
    mine = list(range(len(domain))) if reduction else \
        (space_axes(shape, domain, reduce_axes) if shape is not None else None)
    for a in n.all_input_nodes:
        chain = []
        m = a
        while through(m):  # views a group absorbed are members too: their shape is not their axes
            chain.append(m)
            m = m.args[0]
        ms = _shape(m)
        if m not in members or ms is None or math.prod(ms) == size or ms not in reduced:
            # a leaf (broadcast by strides at load), a full-domain value, a tuple (a multi-output
            # reduction: its ``getitem`` members are checked where they are read) or a column sum's
            # value (read only after the row loop, by the partitioner's own rule)
            continue
        axes = space_axes(ms, domain, reduce_axes)
        for v in reversed(chain):
            axes = None if axes is None else through_view(v, axes)
        if axes is None or mine is None:
            return False
        lead = len(mine) - len(axes)
        if lead < 0:
            return False
        for p, (s, ax) in enumerate(zip(_shape(a), axes)):
            if s != 1 and ax is not None and ax != mine[lead + p]:
                return False
    return True
