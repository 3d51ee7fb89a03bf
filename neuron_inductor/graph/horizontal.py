"""Horizontal fusion: independent kernel groups that read the same tensor launch as one kernel.

The backward of a linear layer is two GEMMs on the same gradient (``dW = dY^T X`` and ``dX = dY W``),
and sibling projections (a SwiGLU's gate and up) read the same activations; neither depends on the
other, so nothing forces them into separate launches. This pass clusters such groups after the
partitioner has fused vertically: two groups join when they share an input tensor and no path of
groups leads from one to the other (so neither needs the other's output, and no third group must run
between them). A cluster becomes one ``multi`` group; lowering emits each part in a scope of its own
inside one kernel (``lowering/graph.py``), so SBUF and PSUM hold one part's tiles at a time, HBM
traffic is unchanged, and a shared operand is one kernel parameter. If the kernel cannot be built,
lowering falls back to the parts as separate kernels (``unmerge``).
"""
from __future__ import annotations

import networkx as nx
import torch
import torch.fx as fx

from ..lowering.groups import GroupDraft, tensor_vals, view_root

aten = torch.ops.aten

#: kinds of groups a multi-part kernel holds (kernels of their own and fallbacks keep their launch)
PART_KINDS = ("matmul", "fused")
#: parts per kernel: enough for a layer's backward GEMMs, small enough to keep kernels readable
MAX_PARTS = 4
#: output elements up to which a group joins a multi-part kernel: a launch costs microseconds, which
#: matters beside small kernels only; large ones (a 7B layer's GEMMs) keep launches of their own, so
#: the per-kernel profile stays one kernel per job
MAX_PART_NUMEL = 1 << 20


def _eligible(g: GroupDraft) -> bool:
    if g.kind not in PART_KINDS or not g.outputs:
        return False
    if any(n.target is aten.copy_.default for n in g.nodes):  # a mutation orders against readers
        return False
    sizes = [t.numel() for o in g.outputs for t in tensor_vals(o)]
    return all(n > 0 for n in sizes) and sum(sizes) <= MAX_PART_NUMEL


def _inputs(g: GroupDraft) -> set[fx.Node]:
    return {view_root(a) for n in g.nodes for a in n.all_input_nodes
            if a not in g.members and view_root(a) not in g.members}


def merge_horizontal(groups: list[GroupDraft]) -> list[GroupDraft]:
    """``groups`` (in a topological order) with sibling clusters folded into ``multi`` groups, still
    in a topological order."""
    owner = {n: i for i, g in enumerate(groups) for n in g.nodes}
    ins = [_inputs(g) for g in groups]
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(groups)))
    for i in range(len(groups)):
        for r in ins[i]:
            j = owner.get(r)
            if j is not None and j != i:
                dag.add_edge(j, i)
    cluster = {i: [i] for i in range(len(groups))}   # representative -> members
    rep = list(range(len(groups)))
    readers: dict[fx.Node, list[int]] = {}
    for i, g in enumerate(groups):
        if not _eligible(g):
            continue
        for r in sorted(ins[i], key=lambda n: n.name):
            for j in readers.get(r, []):
                c = rep[j]
                if c == rep[i] or len(cluster[c]) >= MAX_PARTS:
                    continue
                a, b = rep[i], c
                if nx.has_path(dag, a, b) or nx.has_path(dag, b, a):
                    continue
                # contract a into b
                for p in list(dag.predecessors(a)):
                    if p != b:
                        dag.add_edge(p, b)
                for s in list(dag.successors(a)):
                    if s != b:
                        dag.add_edge(b, s)
                dag.remove_node(a)
                cluster[b] += cluster.pop(a)
                for m in cluster[b]:
                    rep[m] = b
                break
        for r in ins[i]:
            readers.setdefault(r, []).append(i)
    out = []
    for c in nx.lexicographical_topological_sort(dag, key=lambda c: min(cluster[c])):
        members = sorted(cluster[c])
        out.append(groups[members[0]] if len(members) == 1 else _multi([groups[m] for m in members]))
    return out


def _multi(parts: list[GroupDraft]) -> GroupDraft:
    nodes = [n for p in parts for n in p.nodes]
    g = GroupDraft(nodes, [o for p in parts for o in p.outputs], (), kind="multi", parts=list(parts))
    g.members = set(nodes)
    return g
