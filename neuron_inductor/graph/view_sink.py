"""Elementwise values read only through reordering views are recomputed on the viewed inputs.

A fused kernel reads its inputs through any view (strides in the DMA access pattern), but it cannot
compute a value and then read it back reordered: ``slice(mul(dq, sin), -1, 64, 128)`` (rotary
embeddings' backward, ``rotate_half``'s gradient) makes ``mul`` a kernel of its own whose result
crosses HBM once more, only to be read back half by half. Since a view of an elementwise op is the
op of the views of its (broadcast) inputs,

    view(f(a, b)) == f(view(expand(a)), view(expand(b)))

every such value is rebuilt at each view, down a chain of views, until the chain reaches an ordinary
consumer; fusion then puts the op in its consumer's kernel. Only values whose every user is a view
are rewritten (none is stored as it is), and only cheap ops: each rewritten op runs once per view
that reads it (twice, for the two halves of a ``rotate_half``, which together cover it once). The
values are exactly those eager computes: the same op on the same elements.
"""
from __future__ import annotations

import torch
from torch import fx

from ..lowering.registry import ORDER_PRESERVING_VIEWS, op_kind

aten = torch.ops.aten

#: views deep a value may be pushed (slice -> unsqueeze -> expand is three)
MAX_DEPTH = 4

#: views a value is pushed through: index-only views of the logical tensor. Not ``as_strided``
#: (it indexes its input's storage, so on another, or a broadcast, tensor it picks other elements),
#: nor reshapes (``view`` of a strided input is what a ``clone`` exists to avoid)
_LOGICAL = frozenset({
    aten.slice.Tensor, aten.select.int, aten.permute.default, aten.transpose.int, aten.t.default,
    aten.expand.default, aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims,
    aten.squeeze.default, aten.alias.default, aten.diagonal.default,
})

#: elementwise ops that only move data: a copy is in the graph to give its value a layout
_COPIES = frozenset({aten.clone.default, aten._to_copy.default, aten.copy.default, aten.copy_.default})


def _val(n) -> torch.Tensor | None:
    v = n.meta.get("val") if isinstance(n, fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _fake(fn, vals: list[torch.Tensor]):
    mode = next((getattr(v, "fake_mode", None) for v in vals if getattr(v, "fake_mode", None)), None)
    if mode is None:
        return fn()
    with mode:
        return fn()


def _sinkable(v: fx.Node) -> bool:
    """An elementwise value whose every user is a view, at least one of them reordering."""
    if v.op != "call_function" or op_kind(v.target) != "pointwise" or v.target in _COPIES or \
            not v.users:
        return False
    out = _val(v)
    if out is None or any(_val(a) is None for a in v.all_input_nodes) or not v.all_input_nodes:
        return False
    if any(u.op != "call_function" or u.target not in _LOGICAL for u in v.users):
        return False
    return any(_reorders(u) for u in v.users) and all(_fusible_readers(u) for u in v.users)


def _fusible_readers(u: fx.Node, depth: int = MAX_DEPTH) -> bool:
    """Every op reading the view ``u`` (through further views) is elementwise or a reduction: the
    rebuilt value fuses into its reader. A matmul or another kernel would only read it from HBM,
    now perhaps larger (past an ``expand``)."""
    for w in u.users:
        if w.op != "call_function":
            return False
        if w.target in _LOGICAL:
            if depth <= 0 or not _fusible_readers(w, depth - 1):
                return False
        elif op_kind(w.target) not in ("pointwise", "reduction") or w.target in _COPIES:
            return False
    return True


def _reorders(u: fx.Node, depth: int = MAX_DEPTH) -> bool:
    """The view ``u`` reorders (or broadcasts), or leads only to views of which one does: its
    reader cannot compute through it (``unsqueeze`` then ``expand``)."""
    if u.target not in ORDER_PRESERVING_VIEWS:
        return True
    return depth > 0 and bool(u.users) and all(w.op == "call_function" and w.target in _LOGICAL
                                                for w in u.users) and \
        any(_reorders(w, depth - 1) for w in u.users)


def _call(g: fx.Graph, op, args, kwargs, made: list[fx.Node]) -> fx.Node:
    node = g.call_function(op, tuple(args), dict(kwargs))
    made.append(node)
    margs, mkwargs = fx.node.map_arg((tuple(args), dict(kwargs)), lambda a: a.meta["val"])
    flat: list[torch.Tensor] = []
    fx.node.map_aggregate((margs, mkwargs),
                          lambda x: flat.append(x) if isinstance(x, torch.Tensor) else None)
    node.meta["val"] = _fake(lambda: op(*margs, **mkwargs), flat)
    return node


def _broadcast_ok(u: fx.Node, small: list[int], shape: list[int]) -> bool:
    """``u`` may index an input broadcast from ``small`` to ``shape``: it only adds or drops unit
    axes, or slices / selects along an axis the input really has (never along a broadcast one,
    whose elements all alias one)."""
    if u.target in (aten.unsqueeze.default, aten.expand.default, aten.alias.default,
                    aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default):
        return True
    if u.target in (aten.slice.Tensor, aten.select.int):
        d = u.args[1] if len(u.args) > 1 else u.kwargs.get("dim", 0)
        d = d % len(shape)
        k = d - (len(shape) - len(small))
        return k >= 0 and small[k] == shape[d]
    return False


def _sink_one(g: fx.Graph, v: fx.Node, u: fx.Node, made: list[fx.Node]) -> fx.Node:
    """``u`` (a view of ``v``) as ``v``'s op applied to ``u``'s view of each (broadcast) input."""
    shape = list(_val(v).shape)
    args = []
    for a in v.args:
        if isinstance(a, fx.Node):
            if list(_val(a).shape) != shape:
                if not _broadcast_ok(u, list(_val(a).shape), shape):
                    raise ValueError("view across a broadcast axis")
                a = _call(g, aten.expand.default, (a, shape), {}, made)
            a = _call(g, u.target, (a,) + tuple(u.args[1:]), u.kwargs, made)
        args.append(a)
    return _call(g, v.target, args, v.kwargs, made)


def sink_views_into_consumers(gm: fx.GraphModule) -> None:
    """Rewrite every elementwise value read only through views (see the module docstring). Without
    fusion (``gm.meta["fusion"]`` false) nothing would fuse: nothing changes."""
    if not gm.meta.get("fusion", True):
        return
    g = gm.graph
    g.eliminate_dead_code()  # readers a previous rewrite left behind are not readers
    outputs = {a for n in g.nodes if n.op == "output" for a in n.all_input_nodes}
    todo = [(n, 0, _val(n).numel()) for n in g.nodes if n not in outputs and _sinkable(n)]
    while todo:
        v, depth, size = todo.pop()
        # a broadcast (a row statistic expanded over its row) would repeat the op per element
        if v in outputs or depth >= MAX_DEPTH or not _sinkable(v) or \
                any(_val(u) is None or _val(u).numel() > size for u in v.users):
            continue
        made: list[fx.Node] = []
        new_of: dict[fx.Node, fx.Node] = {}
        try:
            for u in list(v.users):
                with g.inserting_before(u):
                    new_of[u] = _sink_one(g, v, u, made)
        except Exception:  # a view the broadcast input cannot take: keep the value as it is
            for n in reversed(made):
                g.erase_node(n)
            continue
        for u, new in new_of.items():
            u.replace_all_uses_with(new)
            g.erase_node(u)
            if new not in outputs and _sinkable(new):
                todo.append((new, depth + 1, size))
        g.erase_node(v)
