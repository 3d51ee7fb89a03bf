"""Fusion: partition an ATen graph into kernel groups.

Greedy, in topological order (like Inductor's scheduler, much smaller): a pointwise or reduction node
joins the group of one of its producers when (1) the group DAG stays acyclic (checked with networkx),
(2) the node lives in the group's iteration domain (same number of elements, or the reduced shape
after a reduction), and (3) the producer's value reaches it without a reordering view (a broadcast
``expand`` of a group value is fine: it is the same tile read along the broadcast axis). A matmul group
absorbs pointwise consumers of its output (the epilogue). Everything else is a group of its own:
other kernels (embedding, concatenation...) and declared fallbacks.

Every extra group boundary costs an HBM round trip, so groups also *merge*: when a node's producers
sit in several fused groups they are folded into one, and after the greedy pass fused groups reading
the same tensor are folded together (each byte read once). A group holds at most two reduction axis
sets: ``reduce_axes`` (reduced along the free axis, per row) and ``col_axes`` (summed over the
partition axis across row tiles: a norm's weight gradient next to its row statistics); values after
a column sum may only be column-shaped. Lowering checks each group and, if a merged group does not fit
the hardware, lowers the groups it was merged from (``unmerge``), so fusion may be optimistic.
"""
from __future__ import annotations

import math

import networkx as nx
import torch
import torch.fx as fx

from ..lowering.fused.group import col_pair as _col_pair, last_axis as _last_axis, reduce_dims
from ..lowering.fused.scan import fusable_scan, scan_fits
from ..lowering.groups import Group, GroupDraft, group_outputs, tensor_vals, unmerge, val, view_root  # noqa: F401
from ..lowering.layout import SUPPORTED, domain_strides
from ..lowering.registry import (ORDER_PRESERVING_VIEWS, REDUCTIONS, VIEWS, node_unsupported, op_kind,
                                 takes_epilogue)
from ..ir import TensorMeta, contiguous_strides
from . import axis_map
from .axis_map import reduced_shapes as _reduced_shapes
from .fusion_recompute import recompute_widening_casts
from .epilogue_absorb import absorb_into_epilogues
from .prologue_absorb import absorb_into_prologues
from .horizontal import merge_horizontal

aten = torch.ops.aten


def unsupported_dtype(n: fx.Node) -> str | None:
    for x in tensor_vals(n) + [t for a in n.all_input_nodes for t in tensor_vals(a)]:
        if x.dtype not in SUPPORTED:
            return f"dtype {x.dtype} has no Trainium type"
    return None


def _contig_meta(shape) -> TensorMeta:
    return TensorMeta(tuple(int(s) for s in shape), contiguous_strides(shape), 0, "float32")


def _fits(shape, domain) -> bool:
    return math.prod(shape) == math.prod(domain) and \
        domain_strides(_contig_meta(shape), list(domain)) is not None


EXPAND = aten.expand.default


def _through(a: fx.Node, fused: bool) -> bool:
    """Views a group computes through: order-preserving ones, and (fused groups) broadcasts."""
    return a.op == "call_function" and (a.target in ORDER_PRESERVING_VIEWS or (fused and a.target is EXPAND))


def _leads(shape, domain, axes) -> bool:
    """``shape`` (a reduced shape of ``domain``) broadcast right-aligned puts every kept dim on
    its own domain axis."""
    lead = len(domain) - len(shape)
    return lead == 0 or all(a < lead for a in axes)


def _is_sum(n: fx.Node) -> bool:
    """A float sum (or mean): what TensorE can add over partitions."""
    return REDUCTIONS[n.target][0] == "add" and val(n).dtype.is_floating_point


class Partitioner:
    def __init__(self, gm: fx.GraphModule, fusion: bool = True, prologues: bool = False) -> None:
        self.gm = gm
        self.fusion = fusion
        self.prologues = prologues
        self.groups: list[GroupDraft] = []
        self.group_of: dict[fx.Node, GroupDraft] = {}
        self.dag = nx.DiGraph()

    def _new(self, kind: str, n: fx.Node, domain=(), reduce_axes=frozenset(), reason="") -> GroupDraft:
        g = GroupDraft([n], [], tuple(domain), frozenset(reduce_axes), kind, reason=reason)
        g.members = {n}
        self.groups.append(g)
        self.group_of[n] = g
        self.dag.add_node(id(g))
        self._link(g, n)
        return g

    def _link(self, g: GroupDraft, n: fx.Node) -> None:
        for a in n.all_input_nodes:
            h = self.group_of.get(view_root(a))
            if h is not None and h is not g:
                self.dag.add_edge(id(h), id(g))

    def _add(self, g: GroupDraft, n: fx.Node) -> None:
        # absorb order-preserving views between the group and n
        for a in n.all_input_nodes:
            chain = []
            while _through(a, g.kind == "fused") and a not in g.members:
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

    def _creates_cycle(self, g: GroupDraft, n: fx.Node) -> bool:
        for a in n.all_input_nodes:
            h = self.group_of.get(view_root(a))
            if h is not None and h is not g and nx.has_path(self.dag, id(g), id(h)):
                return True
        return False

    def _reaches_in_order(self, g: GroupDraft, a: fx.Node) -> bool:
        """``a`` is a member of g, or reaches one through order-preserving views only."""
        while a not in g.members:
            if _through(a, g.kind == "fused"):
                a = a.args[0]
            else:
                return False
        return True

    def _member_inputs(self, g: GroupDraft, n: fx.Node) -> list[fx.Node]:
        """Members of ``g`` that ``n`` reads (through the views the group computes through)."""
        out = []
        for a in n.all_input_nodes:
            while a not in g.members and _through(a, g.kind == "fused"):
                a = a.args[0]
            if a in g.members:
                out.append(a)
        return out

    def _after(self, g: GroupDraft, n: fx.Node, axes: frozenset, memo: dict) -> bool:
        """``n`` (a member or candidate) reads, transitively within g, a reduction over ``axes``."""
        if n in memo:
            return memo[n]
        memo[n] = False
        memo[n] = any((a.target in REDUCTIONS and frozenset(reduce_dims(a)[0]) == axes)
                      or self._after(g, a, axes, memo) for a in self._member_inputs(g, n))
        return memo[n]

    def _aligned(self, g: GroupDraft, n: fx.Node) -> bool:
        """``n`` reads every reduced-space value of ``g`` at the axes it stands for (axis_map)."""
        return axis_map.aligned(n, g.members, lambda a: _through(a, g.kind == "fused"), g.domain,
                                g.reduce_axes, reduction=n.target in REDUCTIONS)

    def _compatible(self, g: GroupDraft, n: fx.Node) -> bool:
        """``n`` may join ``g`` (which may adopt ``n``'s reduction axes; callers restore them on
        False). A scan joins fused groups over its own shape only, and a group holding scans keeps
        axes that put the scanned (last) axis on the free side (``lowering.fused.scan.scan_fits``)."""
        if fusable_scan(n) and (g.kind != "fused" or list(val(n).shape) != list(g.domain)):
            return False
        if not self._compatible_node(g, n):
            return False
        return not (fusable_scan(n) or any(fusable_scan(m) for m in g.members)) or \
            scan_fits(g.domain, g.reduce_axes, g.col_axes)

    def _compatible_node(self, g: GroupDraft, n: fx.Node) -> bool:
        shape = list(val(n).shape)
        if g.kind == "matmul":
            return n.target not in REDUCTIONS and _fits(shape, g.domain)
        if g.kind != "fused":
            return False
        col = g.col_axes
        after_col = bool(col) and self._after(g, n, col, {})
        if n.target in REDUCTIONS:
            src = list(val(n.args[0]).shape)
            dims = frozenset(reduce_dims(n)[0])
            if list(g.domain) != src or not dims or after_col:
                return False
            if dims == g.reduce_axes:
                return self._aligned(g, n)
            if dims == col:
                return _is_sum(n)
            if not g.reduce_axes and not col:
                g.reduce_axes = dims
                return True
            if col or not _col_pair(g.domain, *((dims, g.reduce_axes) if _last_axis(g.domain) in dims
                                                 else (g.reduce_axes, dims))):
                return False
            if _last_axis(g.domain) in dims:
                # the group's reductions so far become the column sums: all sums, nothing read them
                olds = [m for m in g.nodes if m.target in REDUCTIONS]
                if not all(_is_sum(m) for m in olds) or \
                        any(m in g.members and any(x in olds for x in self._member_inputs(g, m))
                            for m in g.nodes):
                    return False
                g.reduce_axes, g.col_axes = dims, g.reduce_axes
                return True
            if not _is_sum(n):
                return False
            g.col_axes = dims
            return True
        if after_col:
            # values after a column sum live after the row-tile loop: column vectors, from column
            # values and leaves only
            return shape in _reduced_shapes(g.domain, col) and \
                all(self._after(g, a, col, {}) or (a.target in REDUCTIONS and frozenset(
                    reduce_dims(a)[0]) == col) for a in self._member_inputs(g, n))
        if _fits(shape, g.domain):
            return self._aligned(g, n)
        if g.reduce_axes and shape in _reduced_shapes(g.domain, g.reduce_axes):
            # a value of the reduced space: lowering evaluates it after the reduction when it reads
            # one; otherwise it is read like any input, broadcast right-aligned over the domain,
            # which is only its place when the reduced axes lead ([513] in a [7, 513] sum over 0,
            # not [7, 513] in a [7, 7, 513] sum over 1)
            return (self._after(g, n, g.reduce_axes, {}) or _leads(shape, g.domain, g.reduce_axes)) \
                and self._aligned(g, n)
        return False

    def run(self) -> list[GroupDraft]:
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
            bad = unsupported_dtype(n) or (node_unsupported(n) if kind != "view" else None)
            if kind == "view" and not bad:
                continue
            if bad or kind == "fallback":
                self._new("fallback", n, reason=bad or "no lowering")
                continue
            if kind == "kernel":
                if takes_epilogue(n.target):
                    self._new("matmul", n, domain=tuple(val(n).shape))
                elif self.fusion and fusable_scan(n):  # keeps its neighbours' values on chip
                    if not self._try_fuse(n):
                        self._new("fused", n, domain=tuple(val(n).shape))
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
        if self.fusion:
            self._merge_siblings()
            absorb_into_epilogues(self)
            if self.prologues:
                absorb_into_prologues(self)
            recompute_widening_casts(self.gm, self.groups, self.group_of, self._compatible,
                                     self._aligned)
        self._outputs()
        order = {n: i for i, n in enumerate(self.gm.graph.nodes)}
        for g in self.groups:  # merged groups (and the parts an epilogue absorbed) run in graph order
            for h in (g, *g.parts):
                h.nodes.sort(key=order.__getitem__)
        return [self._by_id[i] for i in nx.topological_sort(self.dag)]

    def _readers(self, n: fx.Node) -> list[GroupDraft]:
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

    def _try_fuse(self, n: fx.Node, readers: list[GroupDraft] = ()) -> bool:
        """Join a producer's group. ``readers`` (for a mutation) must all run before that group:
        never the group itself (a kernel would overwrite what it still reads), never after it."""
        cands = []
        for a in n.all_input_nodes:
            g = self.group_of.get(view_root(a))
            if g is not None and g not in cands and g.kind in ("fused", "matmul") \
                    and self._reaches_in_order(g, a):
                cands.append(g)
        fused = [g for g in cands if g.kind == "fused"]
        if len(fused) > 1 and not readers:
            # producers in several fused groups: fold them into the largest, so n reads no value
            # back from HBM
            host = max(fused, key=lambda g: (math.prod(g.domain), bool(g.reduce_axes)))
            for g in fused:
                if g is not host and self._merge(host, g):
                    cands.remove(g)
        for g in reversed(cands):
            if g in readers or any(nx.has_path(self.dag, id(g), id(h)) for h in readers):
                continue
            saved = (g.reduce_axes, g.col_axes)
            if self._compatible(g, n) and not self._creates_cycle(g, n):
                self._add(g, n)
                return True
            g.reduce_axes, g.col_axes = saved
        return False

    # --- merging -------------------------------------------------------------------------------
    def _merge(self, host: GroupDraft, other: GroupDraft) -> bool:
        """Fold ``other`` into ``host`` when each of its nodes fits host's domain (checked in order,
        as if it had joined node by node) and no third group runs between the two."""
        if other is host or host.kind != "fused" or other.kind != "fused" or \
                any(m.target is aten.copy_.default for m in host.nodes + other.nodes):
            return False
        for a, b in ((host, other), (other, host)):
            if any(s != id(b) and nx.has_path(self.dag, s, id(b)) for s in self.dag.successors(id(a))):
                return False
            # a value of one read by the other through a reordering view (slice, permute...) would
            # have to round-trip through HBM inside one kernel
            for m in b.nodes:
                for x in m.all_input_nodes:
                    if view_root(x) in a.members and not self._reaches_in_order(a, x):
                        return False
        saved = (host.reduce_axes, host.col_axes, set(host.members))
        ok = True
        for m in other.nodes:
            if m.target not in VIEWS and not self._compatible(host, m):
                ok = False
                break
            host.members.add(m)
        # host's own full-domain nodes were checked before other's reductions set its axes
        ok = ok and all(self._aligned(host, m) for m in host.nodes + other.nodes if m.target not in VIEWS)
        if not ok:
            host.reduce_axes, host.col_axes, host.members = saved
            return False
        self.fold(host, other)
        return True

    def fold(self, host: GroupDraft, other: GroupDraft) -> None:
        """Make ``other`` a part of ``host``: its nodes, its node-to-group entries and its DAG edges
        move to ``host``, and ``other`` leaves the group list."""
        host.parts.append(other)
        host.nodes.extend(other.nodes)
        host.members |= set(other.nodes)
        for m in other.nodes:
            self.group_of[m] = host
        for p in list(self.dag.predecessors(id(other))):
            if p != id(host):
                self.dag.add_edge(p, id(host))
        for s in list(self.dag.successors(id(other))):
            if s != id(host):
                self.dag.add_edge(id(host), s)
        self.dag.remove_node(id(other))
        self.groups.remove(other)

    def _merge_siblings(self) -> None:
        """Fold fused groups that read the same tensor into one, largest domain first: a norm's
        weight-gradient sum and its input gradient both read dY and X."""
        for n in self.gm.graph.nodes:
            readers = []
            for u in n.users:
                for m in ([u] if u.op == "call_function" and u.target not in VIEWS else []) + \
                        [w for w in u.users if u.op == "call_function" and u.target in VIEWS]:
                    g = self.group_of.get(m)
                    if g is not None and g.kind == "fused" and g not in readers and n not in g.members:
                        readers.append(g)
            if len(readers) < 2:
                continue
            readers.sort(key=lambda g: -math.prod(g.domain))
            hosts = [readers[0]]
            for g in readers[1:]:
                if g not in self.groups:
                    continue
                for i, h in enumerate(hosts):  # the first earlier reader that takes it in
                    if h not in self.groups:
                        continue
                    if self._merge(h, g):
                        break
                    # a row reduction can take a column sum in, not always the other way round
                    if math.prod(g.domain) == math.prod(h.domain) and self._merge(g, h):
                        hosts[i] = g
                        break
                else:
                    hosts.append(g)

    def _outputs(self) -> None:
        self._by_id = {id(g): g for g in self.groups}
        for g in self.groups:
            g.outputs = group_outputs(g)


def partition(gm: fx.GraphModule, fusion: bool = True, prologues: bool = False) -> list[Group]:
    """The kernel groups of ``gm``, frozen: the partitioner grows ``GroupDraft``s, lowering reads
    ``Group``s. ``prologues``: fold a GEMM's row-wise lhs producer into its group
    (``prologue_absorb.py``; only targets whose lowering takes it, so that nothing else changes)."""
    groups = Partitioner(gm, fusion, prologues).run()
    return [g.freeze() for g in (merge_horizontal(groups) if fusion else groups)]
