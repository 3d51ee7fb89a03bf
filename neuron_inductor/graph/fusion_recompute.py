"""Recompute widening casts in the consumer instead of storing them: a partitioner post-pass.

The greedy partitioner puts a pointwise node in its producer's group, so a chain like
``y = add(x, mm)`` (bf16) -> ``f = _to_copy(y, float32)`` -> ``p = pow(f, 2)`` lands in the matmul's
epilogue, and the next kernel (the row mean of an RMSNorm) reads ``f`` and ``p`` back as fp32: twice
the bytes of ``y`` each, for values any consumer can recompute from ``y`` with one or two
instructions. Here, after partitioning, every value a group hands to a fused group that could instead
be rebuilt there from a narrower value of the producer (through a chain of single-input pointwise
ops starting at a widening, e.g. bf16 -> fp32) is recomputed in the consumer: the chain is cloned in
the FX graph next to its readers and the clones join the consumer group, so the producer stores the
narrow value once (often already one of its outputs) and the wide one only when something else still
needs it. The clones compute exactly what eager does (the same ops on the stored, already rounded
narrow value), so numerics are unchanged.
"""
from __future__ import annotations

import torch
import torch.fx as fx

from ..lowering.groups import GroupDraft, val
from ..lowering.registry import ORDER_PRESERVING_VIEWS, POINTWISE, VIEWS

#: longest chain recomputed per value (a cast and an op or two: what a consumer redoes for free)
MAX_CHAIN = 4


def _bytes(n: fx.Node) -> int:
    v = val(n)
    return v.numel() * v.element_size() if isinstance(v, torch.Tensor) else 0


def _chain(g: GroupDraft, v: fx.Node) -> tuple[list[fx.Node], fx.Node] | None:
    """(nodes from the anchor's consumer to ``v``, anchor): ``v`` rebuilt from a member of ``g`` of
    fewer bytes through single-input pointwise ops and order-preserving views, or None."""
    chain: list[fx.Node] = []
    n = v
    while n in g.members and len(chain) < MAX_CHAIN:
        ins = n.all_input_nodes
        if n.op != "call_function" or len(ins) != 1 or \
                (n.target not in POINTWISE and n.target not in ORDER_PRESERVING_VIEWS):
            return None
        chain.append(n)
        a = ins[0]
        if a in g.members and not isinstance(val(a), torch.Tensor):
            return None
        if a in g.members and _bytes(a) < _bytes(v) and a.target not in VIEWS:
            return list(reversed(chain)), a
        n = a
    return None


def _readers(v: fx.Node, group_of: dict) -> dict[GroupDraft, list[fx.Node]]:
    """GroupDraft -> the user nodes through which it reads ``v`` (direct users, or views all of whose
    users sit in that one group)."""
    out: dict[GroupDraft, list[fx.Node]] = {}
    for u in v.users:
        if u.op != "call_function":
            continue
        if u.target in ORDER_PRESERVING_VIEWS and u not in group_of:
            gs = {group_of.get(w) for w in u.users}
            if len(gs) == 1 and None not in gs:
                out.setdefault(gs.pop(), []).append(u)
            continue
        if u.target in VIEWS:
            continue
        g = group_of.get(u)
        if g is not None:
            out.setdefault(g, []).append(u)
    return out


def recompute_widening_casts(gm: fx.GraphModule, groups: list[GroupDraft], group_of: dict,
                             fits, aligned) -> int:
    """Move widening-cast chains that cross a group boundary into their fused readers (see the
    module docstring). ``fits(group, node)`` says whether a node may join a group (the partitioner's
    own compatibility check), ``aligned(group, node)`` whether a member reads the group's
    reduced-space values where they belong (checked on every member once the chain has joined: a
    clone in the reduced space may be read through a view that moves its dims). Returns the number
    of values rerouted."""
    moved = 0
    for g in list(groups):
        if g.kind not in ("fused", "matmul"):
            continue
        for v in [m for m in g.nodes if m in g.members]:
            found = _chain(g, v)
            if found is None:
                continue
            chain, anchor = found
            for h, users in _readers(v, group_of).items():
                if h is g or h.kind != "fused":
                    continue
                order = {n: i for i, n in enumerate(gm.graph.nodes)}
                first = min(users, key=order.__getitem__)
                clones: dict[fx.Node, fx.Node] = {}
                with gm.graph.inserting_before(first):
                    prev = anchor
                    for c in chain:
                        new = gm.graph.node_copy(c, lambda a: prev if a is c.all_input_nodes[0] else a)
                        new.meta = dict(c.meta)
                        clones[c] = prev = new
                if not all(fits(h, clones[c]) for c in chain if c.target not in VIEWS):
                    for c in reversed(chain):
                        gm.graph.erase_node(clones[c])
                    continue
                new_members = [clones[c] for c in chain]
                for u in users:
                    u.replace_input_with(v, prev)
                    if u not in h.members:  # an order-preserving view the group computes through
                        new_members.append(u)
                h.members.update(new_members)
                if not all(aligned(h, m) for m in list(h.members) if m.target not in VIEWS):
                    h.members.difference_update(new_members)
                    for u in users:
                        u.replace_input_with(prev, v)
                    for c in reversed(chain):
                        gm.graph.erase_node(clones[c])
                    continue
                # the part holding the first reader computes the clones, should lowering unmerge h
                part = next((p for p in h.parts if any(u in p.nodes for u in users)), None)
                for x in new_members:
                    h.nodes.append(x)
                    h.members.add(x)
                    group_of[x] = h
                    if part is not None:
                        part.nodes.append(x)
                moved += 1
                order = {n: i for i, n in enumerate(gm.graph.nodes)}
                for p in h.parts:
                    p.nodes.sort(key=order.__getitem__)
            _drop_dead(gm, g, group_of)
    return moved


def _drop_dead(gm: fx.GraphModule, g: GroupDraft, group_of: dict) -> None:
    """Members nothing reads any more (their readers now recompute them) leave the graph."""
    changed = True
    while changed:
        changed = False
        for m in reversed(list(g.nodes)):
            if not m.users and m.op == "call_function" and m.target in POINTWISE or \
                    (not m.users and m.target in ORDER_PRESERVING_VIEWS):
                g.nodes.remove(m)
                g.members.discard(m)
                for p in g.parts:
                    if m in p.nodes:
                        p.nodes.remove(m)
                group_of.pop(m, None)
                gm.graph.erase_node(m)
                changed = True
