"""Rotary embeddings, forward and backward, become one ``neuron_inductor::rotary`` kernel each.

The traced forward ``x * cos + cat(-x2, x1) * sin`` (``rotate_half``, x1/x2 the halves of x's last
axis) and the gradient AOTAutograd derives for it, ``g * cos + cat(y2, -y1)`` with ``y = g * sin``,
are otherwise rewritten by ``cat_select`` into an elementwise select over a ``[..., 2, n]`` space:
fused, but tiled one half-head at a time (128-byte DMA rows, ``x`` loaded three times, the tables once
per head). ``lowering.rotary`` computes the same values with whole-head rows and the tables loaded once
per row tile. The match is structural and exact (same nodes, same halves of the same tensor, one dtype);
anything else is left to ``cat_select``.
"""
from __future__ import annotations

import operator

import torch
from torch import fx

from ..lowering.rotary import ROTARY, supported

aten = torch.ops.aten


def _val(n) -> torch.Tensor | None:
    v = n.meta.get("val") if isinstance(n, fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _is(n, *targets) -> bool:
    return isinstance(n, fx.Node) and n.op == "call_function" and n.target in targets


def _mul_with(n, x) -> fx.Node | None:
    """``n`` is ``mul(x, t)`` or ``mul(t, x)`` of tensors: ``t``."""
    if not _is(n, aten.mul.Tensor) or len(n.args) != 2:
        return None
    a, b = n.args
    if a is x and isinstance(b, fx.Node):
        return b
    if b is x and isinstance(a, fx.Node):
        return a
    return None


def _half_of(v: fx.Node, x: fx.Node, which: int) -> bool:
    """``v`` is a view of ``x``'s half ``which`` (0: ``[..., :n]``, 1: ``[..., n:]``) along the last axis."""
    if not _is(v, aten.slice.Tensor, aten.as_strided.default) or v.args[0] is not x:
        return False
    xv, hv = _val(x), _val(v)
    if xv is None or hv is None:
        return False
    n = xv.shape[-1] // 2
    if tuple(hv.shape) != tuple(xv.shape[:-1]) + (n,) or hv.stride() != xv.stride():
        return False
    return hv.storage_offset() == xv.storage_offset() + which * n * xv.stride(-1)


def _cat2(n) -> tuple[fx.Node, fx.Node] | None:
    if not _is(n, aten.cat.default):
        return None
    xs = n.args[0]
    d = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim", 0)
    v = _val(n)
    if v is None or not isinstance(xs, (list, tuple)) or len(xs) != 2 or d % v.dim() != v.dim() - 1:
        return None
    return xs[0], xs[1]


def _forward(add: fx.Node) -> tuple[fx.Node, fx.Node, fx.Node] | None:
    """(x, cos, sin) of ``add(mul(x, cos), mul(cat(-x2, x1), sin))``, either operand order."""
    for m1, m2 in (add.args, add.args[::-1]):
        if not _is(m1, aten.mul.Tensor) or not _is(m2, aten.mul.Tensor):
            continue
        for cat, sin in (m2.args, m2.args[::-1]):
            pieces = _cat2(cat)
            if pieces is None or not isinstance(sin, fx.Node) or not _is(pieces[0], aten.neg.default):
                continue
            for x, cos in (m1.args, m1.args[::-1]):
                if isinstance(x, fx.Node) and isinstance(cos, fx.Node) and \
                        _half_of(pieces[0].args[0], x, 1) and _half_of(pieces[1], x, 0):
                    return x, cos, sin
    return None


def _backward(add: fx.Node) -> tuple[fx.Node, fx.Node, fx.Node] | None:
    """(g, cos, sin) of ``add(mul(g, cos), cat(y[..., n:], -y[..., :n]))`` with ``y = mul(g, sin)``."""
    for m1, cat in (add.args, add.args[::-1]):
        pieces = _cat2(cat)
        if pieces is None or not _is(m1, aten.mul.Tensor) or not _is(pieces[1], aten.neg.default):
            continue
        y = pieces[0].args[0] if _is(pieces[0], aten.slice.Tensor, aten.as_strided.default) else None
        if y is None or not _half_of(pieces[0], y, 1) or not _half_of(pieces[1].args[0], y, 0):
            continue
        for g, cos in (m1.args, m1.args[::-1]):
            sin = _mul_with(y, g)
            if isinstance(g, fx.Node) and isinstance(cos, fx.Node) and sin is not None:
                return g, cos, sin
    return None


def rotary_to_kernel(gm: fx.GraphModule) -> None:
    """Replace the matched rotary forward / backward ``add`` nodes with ``neuron_inductor::rotary``
    calls, one per (cos, sin, direction) for every match whose input exists at the first match (q and
    k share one kernel and one pass over the tables); dead-code elimination drops what they replace."""
    if not gm.meta.get("fusion", True):  # the unfused baseline keeps one kernel per op
        return
    g = gm.graph
    order = {n: i for i, n in enumerate(g.nodes)}
    groups: dict[tuple, list[list]] = {}
    for node in list(g.nodes):
        if not _is(node, aten.add.Tensor) or len(node.args) != 2 or node.kwargs.get("alpha", 1) != 1:
            continue
        for backward, match in ((False, _forward), (True, _backward)):
            m = match(node)
            if m is None:
                continue
            x, cos, sin = m
            vals = [_val(x), _val(cos), _val(sin), _val(node)]
            if any(v is None for v in vals) or supported(*vals) is not None:
                break
            calls = groups.setdefault((cos, sin, backward), [])
            # a call sits before its first add, so every input of it must come before that add
            # (and share the first one's shape)
            if not calls or order[x] > order[calls[-1][0][0]] or \
                    tuple(vals[0].shape) != tuple(_val(calls[-1][0][1]).shape):
                calls.append([])
            calls[-1].append((node, x))
            break
    for (cos, sin, backward), calls in groups.items():
        for call_nodes in calls:
            first = call_nodes[0][0]
            with g.inserting_before(first):
                call = g.call_function(ROTARY, ([x for _, x in call_nodes], cos, sin, backward))
            call.meta["val"] = [add.meta["val"] for add, _ in call_nodes]
            items = []
            for i, (add, _) in enumerate(call_nodes):
                with g.inserting_before(first):
                    items.append(g.call_function(operator.getitem, (call, i)))
                items[-1].meta["val"] = add.meta["val"]
            for item, (add, _) in zip(items, call_nodes):
                add.replace_all_uses_with(item)
                g.erase_node(add)
