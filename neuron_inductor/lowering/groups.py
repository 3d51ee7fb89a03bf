"""The group type the partitioner hands lowering, and the questions both ask of it.

The partitioner (``graph/fusion.py``) builds :class:`Group` s; ``lower_graph`` takes them. A merged group
that turns out not to fit the hardware is lowered as the groups it was merged from (:func:`unmerge`),
so the partitioner may be optimistic. These helpers live here, on the lower side, so that lowering
needs nothing from the graph stage.
"""
from __future__ import annotations

from dataclasses import replace

import networkx as nx
import torch
import torch.fx as fx

from .fused.group import Group, GroupDraft, GroupKind, last_axis, reduce_dims  # noqa: F401 - re-exported
from .registry import ORDER_PRESERVING_VIEWS, REDUCTIONS, VIEWS

aten = torch.ops.aten

__all__ = ["Group", "axes_of", "group_outputs", "tensor_vals", "unmerge", "val", "view_root"]


def val(n: fx.Node):
    """The traced value (a fake tensor, a tuple of them, a SymInt...) of ``n``."""
    return n.meta.get("val")


def tensor_vals(n: fx.Node) -> list:
    v = val(n)
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (list, tuple)):
        return [x for x in v if isinstance(x, torch.Tensor)]
    return []


def view_root(n: fx.Node) -> fx.Node:
    """The node that owns ``n``'s storage: ``n`` through any chain of views."""
    while n.op == "call_function" and n.target in VIEWS:
        n = n.args[0]
    return n


def _escapes(members: set, m: fx.Node) -> bool:
    if m.target is aten.copy_.default:  # its effect is the write, even with no users
        return True
    for u in m.users:
        if u.op == "output" or u not in members:
            return True
        if u.target in ORDER_PRESERVING_VIEWS and _escapes(members, u):
            return True
    return False


def group_outputs(g: Group) -> list[fx.Node]:
    """The group's values read outside it (or written in place): the kernel's outputs."""
    outs = []
    for m in g.nodes:
        if m.target in VIEWS:
            continue
        if m.target.__name__ == "getitem":
            # a multi-output kernel (flash attention: out, logsumexp) hands out each result
            # through its getitem; fused groups compute through them instead
            if g.kind == "kernel" and _escapes(g.members, m):
                outs.append(m)
            continue
        if _escapes(g.members, m):
            outs.append(m)
    return outs


def unmerge(g: Group) -> list[Group]:
    """The groups ``g`` was merged from, in dependency order, with their own outputs; ``[g]`` if it
    was never merged. Lowering uses them when the merged group does not fit the hardware."""
    if not g.parts:
        return [g]
    taken = {n for p in g.parts for n in p.nodes}
    own_nodes = [n for n in g.nodes if n not in taken]
    row, col = axes_of(own_nodes, g.domain)
    own = Group(own_nodes, (), g.domain, row, g.kind, col_axes=col)
    parts = [p for p in [own] + list(g.parts) if p.nodes]
    parts = [replace(p, members=frozenset(p.nodes)) for p in parts]
    parts = [replace(p, outputs=group_outputs(p)) for p in parts]
    where = {n: i for i, p in enumerate(parts) for n in p.nodes}
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(parts)))
    for i, p in enumerate(parts):
        for n in p.nodes:
            for a in n.all_input_nodes:
                j = where.get(view_root(a), where.get(a))
                if j is not None and j != i:
                    dag.add_edge(j, i)
    try:
        return [parts[i] for i in nx.topological_sort(dag)]
    except nx.NetworkXUnfeasible:
        # nodes that joined after a merge can make host and part depend on each other: the
        # caller then splits the group op by op instead
        return [g]


def axes_of(nodes, domain) -> tuple[frozenset, frozenset]:
    """(row, column) reduction axis sets of a node list (a part being lowered on its own)."""
    sets = list(dict.fromkeys(frozenset(reduce_dims(n)[0]) for n in nodes if n.target in REDUCTIONS))
    if len(sets) < 2:
        return (sets[0] if sets else frozenset()), frozenset()
    a, b = sets[:2]
    return (a, b) if last_axis(domain) in a else (b, a)
