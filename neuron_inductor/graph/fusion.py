"""Fusion: partition an ATen graph into kernel groups.

Greedy, in topological order (like Inductor's scheduler, much smaller): a pointwise or reduction node
joins the group of one of its producers when (1) the group DAG stays acyclic (checked with networkx),
(2) the node lives in the group's iteration domain (same number of elements, or the reduced shape
after a reduction), and (3) the producer's value reaches it without a reordering view. A matmul group
absorbs pointwise consumers of its output (the epilogue). Everything else is a group of its own:
other kernels (embedding, concatenation...) and declared fallbacks. Lowering checks each group and
splits it if it does not fit the hardware, so fusion may be optimistic.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import networkx as nx
import torch
import torch.fx as fx

from ..lowering.fused import FusedGroup, reduce_dims
from ..lowering.layout import SUPPORTED, domain_strides
from ..lowering.registry import ORDER_PRESERVING_VIEWS, REDUCTIONS, VIEWS, op_kind
from ..ir import TensorMeta

aten = torch.ops.aten
MATMULS = {aten.mm.default, aten.bmm.default}


@dataclass(eq=False)
class Group(FusedGroup):
    """A kernel group. ``kind``: 'fused', 'matmul' (with epilogue), 'kernel' or 'fallback'."""

    reason: str = ""
    members: set = field(default_factory=set)


def val(n: fx.Node):
    return n.meta.get("val")


def tensor_vals(n: fx.Node) -> list:
    v = val(n)
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (list, tuple)):
        return [x for x in v if isinstance(x, torch.Tensor)]
    return []


def unsupported_dtype(n: fx.Node) -> str | None:
    for x in tensor_vals(n) + [t for a in n.all_input_nodes for t in tensor_vals(a)]:
        if x.dtype not in SUPPORTED:
            return f"dtype {x.dtype} has no Trainium type"
    return None


def view_root(n: fx.Node) -> fx.Node:
    while n.op == "call_function" and n.target in VIEWS:
        n = n.args[0]
    return n


def _contig_meta(shape) -> TensorMeta:
    st, acc = [], 1
    for s in reversed(list(shape)):
        st.append(acc)
        acc *= max(int(s), 1)
    return TensorMeta(tuple(int(s) for s in shape), tuple(reversed(st)), 0, "float32")


def _fits(shape, domain) -> bool:
    return math.prod(shape) == math.prod(domain) and \
        domain_strides(_contig_meta(shape), list(domain)) is not None


class Partitioner:
    def __init__(self, gm: fx.GraphModule, fusion: bool = True) -> None:
        self.gm = gm
        self.fusion = fusion
        self.groups: list[Group] = []
        self.group_of: dict[fx.Node, Group] = {}
        self.dag = nx.DiGraph()

    def _new(self, kind: str, n: fx.Node, domain=(), reduce_axes=frozenset(), reason="") -> Group:
        g = Group([n], [], tuple(domain), frozenset(reduce_axes), kind, reason=reason)
        g.members = {n}
        self.groups.append(g)
        self.group_of[n] = g
        self.dag.add_node(id(g))
        self._link(g, n)
        return g

    def _link(self, g: Group, n: fx.Node) -> None:
        for a in n.all_input_nodes:
            h = self.group_of.get(view_root(a))
            if h is not None and h is not g:
                self.dag.add_edge(id(h), id(g))

    def _add(self, g: Group, n: fx.Node) -> None:
        # absorb order-preserving views between the group and n
        for a in n.all_input_nodes:
            chain = []
            while a.op == "call_function" and a.target in ORDER_PRESERVING_VIEWS and a not in g.members:
                chain.append(a)
                a = a.args[0]
            if a in g.members:
                for v in reversed(chain):
                    g.nodes.append(v)
                    g.members.add(v)
        g.nodes.append(n)
        g.members.add(n)
        self.group_of[n] = g
        self._link(g, n)

    def _creates_cycle(self, g: Group, n: fx.Node) -> bool:
        for a in n.all_input_nodes:
            h = self.group_of.get(view_root(a))
            if h is not None and h is not g and nx.has_path(self.dag, id(g), id(h)):
                return True
        return False

    def _reaches_in_order(self, g: Group, a: fx.Node) -> bool:
        """``a`` is a member of g, or reaches one through order-preserving views only."""
        while a not in g.members:
            if a.op == "call_function" and a.target in ORDER_PRESERVING_VIEWS:
                a = a.args[0]
            else:
                return False
        return True

    def _compatible(self, g: Group, n: fx.Node) -> bool:
        shape = list(val(n).shape)
        if g.kind == "matmul":
            return n.target not in REDUCTIONS and _fits(shape, g.domain)
        if g.kind != "fused":
            return False
        if n.target in REDUCTIONS:
            src = list(val(n.args[0]).shape)
            dims, _ = reduce_dims(n)
            if not g.reduce_axes:
                if list(g.domain) != src or not dims:
                    return False
                g.reduce_axes = frozenset(dims)
                return True
            return list(g.domain) == src and frozenset(dims) == g.reduce_axes
        if _fits(shape, g.domain):
            return True
        if g.reduce_axes:
            kept = [s for i, s in enumerate(g.domain) if i not in g.reduce_axes]
            keep1 = [1 if i in g.reduce_axes else s for i, s in enumerate(g.domain)]
            return shape in (kept, keep1)
        return False

    def run(self) -> list[Group]:
        for n in self.gm.graph.nodes:
            if n.op != "call_function":
                continue
            if n.target.__name__ == "getitem" and n.args[0] in self.group_of:
                g = self.group_of[n.args[0]]
                g.nodes.append(n)
                g.members.add(n)
                self.group_of[n] = g
                continue
            kind = op_kind(n.target)
            bad = unsupported_dtype(n)
            if kind == "view" and not bad:
                continue
            if bad or kind == "fallback":
                self._new("fallback", n, reason=bad or "no lowering")
                continue
            if kind == "kernel":
                if n.target in MATMULS:
                    self._new("matmul", n, domain=tuple(val(n).shape))
                else:
                    self._new("kernel", n)
                continue
            if n.target is aten.copy_.default:  # an input mutation: after every read of the old value
                if not (self.fusion and self._try_fuse(n, self._readers(n))):
                    self._new("fused", n, domain=tuple(val(n).shape))
                for h in self._readers(n):
                    self.dag.add_edge(id(h), id(self.group_of[n]))
                continue
            if self.fusion and self._try_fuse(n):
                continue
            if n.target in REDUCTIONS:
                dims, _ = reduce_dims(n)
                self._new("fused", n, domain=tuple(val(n.args[0]).shape), reduce_axes=dims)
            else:
                self._new("fused", n, domain=tuple(val(n).shape))
        self._outputs()
        order = {n: i for i, n in enumerate(self.gm.graph.nodes)}
        for g in self.groups:
            g.nodes.sort(key=order.__getitem__)
        return [self._by_id[i] for i in nx.topological_sort(self.dag)]

    def _readers(self, n: fx.Node) -> list[Group]:
        """Groups other than ``n``'s that read the tensor ``copy_`` node ``n`` overwrites."""
        found, todo = [], [view_root(n.args[0])]
        while todo:
            x = todo.pop()
            for u in x.users:
                if u is n:
                    continue
                if u.op == "call_function" and u.target in VIEWS:
                    todo.append(u)
                elif u in self.group_of and self.group_of[u] not in found:
                    found.append(self.group_of[u])
        return found

    def _try_fuse(self, n: fx.Node, readers: list[Group] = ()) -> bool:
        """Join a producer's group. ``readers`` (for a mutation) must all run before that group:
        never the group itself (a kernel would overwrite what it still reads), never after it."""
        cands = []
        for a in n.all_input_nodes:
            g = self.group_of.get(view_root(a))
            if g is not None and g not in cands and g.kind in ("fused", "matmul") \
                    and self._reaches_in_order(g, a):
                cands.append(g)
        for g in reversed(cands):
            if g in readers or any(nx.has_path(self.dag, id(g), id(h)) for h in readers):
                continue
            saved = g.reduce_axes
            if self._compatible(g, n) and not self._creates_cycle(g, n):
                self._add(g, n)
                return True
            g.reduce_axes = saved
        return False

    def _outputs(self) -> None:
        self._by_id = {id(g): g for g in self.groups}
        for g in self.groups:
            outs = []
            for m in g.nodes:
                if m.target in VIEWS:
                    continue
                if m.target.__name__ == "getitem":
                    # a multi-output kernel (flash attention: out, logsumexp) hands out each result
                    # through its getitem; fused groups compute through them instead
                    if g.kind == "kernel" and self._escapes(g, m):
                        outs.append(m)
                    continue
                if self._escapes(g, m):
                    outs.append(m)
            g.outputs = outs

    def _escapes(self, g: Group, m: fx.Node) -> bool:
        if m.target is aten.copy_.default:  # its effect is the write, even with no users
            return True
        for u in m.users:
            if u.op == "output":
                return True
            if u not in g.members:
                return True
            if u.target in ORDER_PRESERVING_VIEWS and self._escapes(g, u):
                return True
        return False


def partition(gm: fx.GraphModule, fusion: bool = True) -> list[Group]:
    return Partitioner(gm, fusion).run()
