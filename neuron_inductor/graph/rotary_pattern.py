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

from ..config import Config
from ..lowering.rotary import ROTARY, ROTARY_CAT, supported
from .effects import is_impure

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


def _zeros(n) -> bool:
    return _is(n, aten.full.default) and n.args[1] == 0


def _scatter_half(n, which: int) -> fx.Node | None:
    """``n`` is ``slice_scatter(zeros, v, -1, start, end)`` into half ``which`` of the last axis: v."""
    if not _is(n, aten.slice_scatter.default) or not _zeros(n.args[0]):
        return None
    v, z = _val(n), _val(n.args[1])
    if v is None or z is None:
        return None
    args = list(n.args[2:]) + [None] * 3
    dim, start, end = args[0] if args[0] is not None else 0, args[1] or 0, args[2]
    half = v.shape[-1] // 2
    end = v.shape[-1] if end is None else min(end, v.shape[-1])
    if dim % v.dim() != v.dim() - 1 or (start, end) != ((0, half) if which == 0 else (half, v.shape[-1])):
        return None
    return n.args[1]


def _backward_scatter(add: fx.Node) -> tuple[fx.Node, fx.Node, fx.Node] | None:
    """(g, cos, sin) of the gradient through slices (``rotate_half`` written with ``x[..., :n]``):
    ``mul(g, cos) + (slice_scatter(0, y[..., n:], :n) + slice_scatter(0, -y[..., :n], n:))``."""
    for m1, s in (add.args, add.args[::-1]):
        if not _is(m1, aten.mul.Tensor) or not _is(s, aten.add.Tensor) or len(s.args) != 2:
            continue
        for a, b in (s.args, s.args[::-1]):
            lo, hi = _scatter_half(a, 0), _scatter_half(b, 1)
            if lo is None or hi is None or not _is(hi, aten.neg.default) or \
                    not _is(lo, aten.slice.Tensor, aten.as_strided.default):
                continue
            y = lo.args[0]
            if not _half_of(lo, y, 1) or not _half_of(hi.args[0], y, 0):
                continue
            for g, cos in (m1.args, m1.args[::-1]):
                sin = _mul_with(y, g)
                if isinstance(g, fx.Node) and isinstance(cos, fx.Node) and sin is not None:
                    return g, cos, sin
    return None


def rotary_to_kernel(gm: fx.GraphModule, cfg: Config | None = None) -> None:
    """Replace the matched rotary forward / backward ``add`` nodes with ``neuron_inductor::rotary``
    calls, one per (cos, sin, direction) for every match whose input exists at the first match (q and
    k share one kernel and one pass over the tables); dead-code elimination drops what they replace."""
    if cfg is not None and not cfg.fusion:  # the unfused baseline keeps one kernel per op
        return
    g = gm.graph
    order = {n: i for i, n in enumerate(g.nodes)}
    groups: dict[tuple, list[list]] = {}
    for node in list(g.nodes):
        if not _is(node, aten.add.Tensor) or len(node.args) != 2 or node.kwargs.get("alpha", 1) != 1:
            continue
        for backward, match in ((False, _forward), (True, _backward), (True, _backward_scatter)):
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


def _piece(p) -> tuple[fx.Node, int, tuple[int, ...]] | None:
    """(source, u, perm) of a cat piece ``permute(unsqueeze(source, u), perm)``."""
    if not _is(p, aten.permute.default) or not _is(p.args[0], aten.unsqueeze.default):
        return None
    un = p.args[0]
    src = un.args[0]
    sv = _val(src)
    if sv is None or len(p.users) != 1 or len(un.users) != 1:
        return None
    u = un.args[1] % (sv.dim() + 1)
    perm = tuple(int(d) % (sv.dim() + 1) for d in p.args[1])
    return src, u, perm


def rotary_into_cat(gm: fx.GraphModule, cfg: Config | None = None) -> None:
    """A ``cat`` whose pieces are (unsqueezed, permuted) results of one rotary call, followed by
    tensors of the same shape (the backward's ``cat(dq, dk, dv)`` feeding the QKV weight gradient),
    becomes one ``neuron_inductor::rotary_cat``: each rotated piece is written straight into its slot
    instead of round-tripping through HBM before a copy kernel."""
    if cfg is not None and not cfg.fusion:
        return
    g = gm.graph
    g.eliminate_dead_code(is_impure)  # the earlier rewrites leave dead readers of the pieces behind
    for node in list(g.nodes):
        if not _is(node, aten.cat.default) or not isinstance(node.args[0], (list, tuple)):
            continue
        v = _val(node)
        pieces = [_piece(p) for p in node.args[0]]
        if v is None or not v.is_contiguous() or any(p is None for p in pieces):
            continue
        if len({(u, perm) for _, u, perm in pieces}) != 1:
            continue
        srcs = [s for s, _, _ in pieces]
        # the leading pieces: results of rotary calls sharing (cos, sin, direction), each used only
        # here, every result of each call among them; the rest are passed through unchanged
        n_rot = 0
        while n_rot < len(srcs) and isinstance(srcs[n_rot], fx.Node) and \
                srcs[n_rot].target is operator.getitem and _is(srcs[n_rot].args[0], ROTARY):
            n_rot += 1
        lead, rest = srcs[:n_rot], srcs[n_rot:]
        calls = list(dict.fromkeys(s.args[0] for s in lead))
        if not calls or len({tuple(c.args[1:]) for c in calls}) != 1 or \
                any(len(s.users) != 1 for s in lead) or \
                sum(len(c.args[0]) for c in calls) != n_rot or \
                any(len(c.users) != len(c.args[0]) for c in calls) or \
                len({(id(s.args[0]), s.args[1]) for s in lead}) != n_rot:
            continue
        _, cos, sin, backward = calls[0].args
        xs = [s.args[0].args[0][s.args[1]] for s in lead]
        shape = tuple(_val(xs[0]).shape)
        if any(_val(s) is None or tuple(_val(s).shape) != shape or _val(s).dtype != _val(xs[0]).dtype
               for s in rest):
            continue
        _, u, perm = pieces[0]
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
        with g.inserting_before(node):
            call = g.call_function(ROTARY_CAT, (xs + list(rest), n_rot, cos, sin, backward, u,
                                                list(perm), dim % v.dim()))
        call.meta["val"] = v
        node.replace_all_uses_with(call)
        g.erase_node(node)
