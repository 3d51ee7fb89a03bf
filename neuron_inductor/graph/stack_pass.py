"""Masked sums that are really a concatenation become one ``cat``.

The backward of ``x.unbind(d)`` (and of ``x[0], x[1], ...``) reaches us as ``select_backward``
decomposed into ``where(iota == i, g_i, 0)`` per piece, summed: a fused qkv projection's gradient is
three masked selects and two adds over a buffer three times the size of each gradient, all on
VectorE. When the selected indices cover the axis exactly once, each output element is one ``g_i``
plus zeros, which is ``cat([g_0, g_1, ...], d)``: copies only, and exact (``x + 0`` is ``x``; a
``-0.0`` gradient even keeps its sign, as eager's ``stack`` does).
"""
from __future__ import annotations

import torch
from torch import fx

from ..config import Config

aten = torch.ops.aten

_ARANGE = (aten.arange.default, aten.arange.start, aten.arange.start_step)


def _val(n) -> torch.Tensor | None:
    v = n.meta.get("val") if isinstance(n, fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _add_leaves(root: fx.Node) -> list[fx.Node] | None:
    """Leaves of a tree of two-tensor ``add.Tensor`` nodes whose inner adds feed only the tree."""
    leaves: list[fx.Node] = []
    stack = [root]
    while stack:
        n = stack.pop()
        if n.op == "call_function" and n.target is aten.add.Tensor and not n.kwargs \
                and len(n.args) == 2 and all(isinstance(a, fx.Node) for a in n.args) \
                and (n is root or len(n.users) == 1):
            stack.extend(n.args)
        else:
            leaves.append(n)
    return leaves if len(leaves) >= 2 else None


def _iota_axis(n: fx.Node, shape: tuple[int, ...]) -> int | None:
    """``d`` when ``n`` is ``arange(shape[d])`` viewed with 1 on every other axis of ``shape``."""
    if n.op != "call_function" or n.target not in (aten.view.default, aten.reshape.default):
        return None
    src = n.args[0]
    if not isinstance(src, fx.Node) or src.target not in _ARANGE:
        return None
    args = [a for a in src.args]
    start, end, step = (0, args[0], 1) if src.target is aten.arange.default else \
        (args[0], args[1], args[2] if len(args) > 2 else 1)
    v = _val(n)
    if v is None or (start, step) != (0, 1) or len(v.shape) != len(shape):
        return None
    axes = [i for i, s in enumerate(v.shape) if s != 1]
    if len(axes) != 1 or v.shape[axes[0]] != shape[axes[0]] or end != shape[axes[0]]:
        return None
    return axes[0]


def _leaf(n: fx.Node, shape: tuple[int, ...], dtype) -> tuple[fx.Node, int, fx.Node] | None:
    """(iota view, selected index, the piece unsqueezed along the axis) of
    ``where(iota == i, expand(unsqueeze(g, d)), full(shape, 0))``."""
    if n.op != "call_function" or n.target is not aten.where.self or len(n.users) != 1:
        return None
    cond, x, zero = n.args
    if not all(isinstance(a, fx.Node) for a in (cond, x, zero)):
        return None
    if zero.target is not aten.full.default or zero.args[1] != 0 or tuple(zero.args[0]) != shape:
        return None
    if cond.target is not aten.eq.Scalar or not isinstance(cond.args[1], int) \
            or isinstance(cond.args[1], bool) or not isinstance(cond.args[0], fx.Node):
        return None
    if x.target is not aten.expand.default or not isinstance(x.args[0], fx.Node):
        return None
    piece = x.args[0]
    if piece.target is not aten.unsqueeze.default:
        return None
    d = _iota_axis(cond.args[0], shape)
    pv = _val(piece)
    if d is None or pv is None or pv.dtype != dtype or piece.args[1] % len(shape) != d:
        return None
    if tuple(pv.shape) != shape[:d] + (1,) + shape[d + 1:]:
        return None
    return cond.args[0], cond.args[1], piece


def masked_sum_to_cat(gm: fx.GraphModule, cfg: Config | None = None) -> None:
    """Rewrite ``sum_i where(iota == i, g_i, 0)`` covering every index once into ``cat``."""
    g = gm.graph
    for node in reversed(list(g.nodes)):  # outermost add first; inner partial sums do not cover
        if node.op != "call_function" or node.target is not aten.add.Tensor or not node.users:
            continue
        v = _val(node)
        leaves = _add_leaves(node) if v is not None else None
        if not leaves:
            continue
        shape = tuple(v.shape)
        found = [_leaf(n, shape, v.dtype) for n in leaves]
        if any(f is None for f in found) or len({f[0] for f in found}) != 1:
            continue
        d = _iota_axis(found[0][0], shape)
        by_index = {i: piece for _, i, piece in found}
        if len(by_index) != len(found) or sorted(by_index) != list(range(shape[d])):
            continue
        with g.inserting_before(node):
            cat = g.call_function(aten.cat.default, ([by_index[i] for i in range(shape[d])], d))
            cat.meta["val"] = v
        node.replace_all_uses_with(cat)  # the masked selects die in dead-code elimination
