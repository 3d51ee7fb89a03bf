"""Fold a pointwise group that reads a GEMM's output into that GEMM's epilogue: a partitioner post-pass.

The greedy partitioner puts a pointwise node in the group of one producer. When the node reads both
a matmul's output and a value of a fused group that started earlier from graph inputs (a SwiGLU
backward: ``sigmoid(gate)`` is computed from the saved gate pre-activation before the GEMM that
yields ``d(silu(gate) * up)``), it joins the fused group, and the GEMM stores its tile to HBM only for
that group to read it back. Here, after partitioning, such a fused group joins the matmul group as
more epilogue: every node lives in the GEMM's output domain, the group's other inputs are read tile by
tile like any epilogue operand, and nothing it reads depends on the GEMM through a third group. One
launch and one HBM round trip of the GEMM's output fewer; the values computed are the same ops on the
same inputs, so numerics are unchanged.

A fused group that reduces the rows of a GEMM's output (a norm, a softmax) runs the GEMM inside its
row loop instead (``_row_reducer``, ``lowering/matmul/rows.py``: 2-D or batched, rows of up to 8 PSUM
banks). Only GEMMs whose output rows fit one PSUM column tile take more pointwise epilogue: the epilogue reads its
operands one output tile at a time, so for wider outputs (an MLP's 11008 columns) its DMA rows would
be 512 elements where the separate pass reads whole rows in large chunks.
"""
from __future__ import annotations

import math

import networkx as nx
import torch

from ..lowering.groups import GroupDraft, view_root
from ..lowering.registry import ORDER_PRESERVING_VIEWS, REDUCTIONS, VIEWS
from ..target import common_limit

aten = torch.ops.aten


def _absorbable(p, m: GroupDraft, f: GroupDraft) -> bool:
    """Fused group ``f`` can become more epilogue of matmul group ``m`` (``p``: the partitioner)."""
    if f.kind != "fused" or f.reduce_axes or f.col_axes or f.parts or \
            not m.domain or m.domain[-1] > common_limit("matmul_n_max"):
        return False
    reads_m = False
    for n in f.nodes:
        if n.target is aten.copy_.default or n.target in REDUCTIONS:
            return False
        if n.target in VIEWS:
            # the epilogue computes through order-preserving views of its own values only
            if n.args[0] in f.members and n.target not in ORDER_PRESERVING_VIEWS:
                return False
        elif not p._compatible(m, n):
            return False
        for a in n.all_input_nodes:
            if a in f.members:
                continue
            if view_root(a) in m.members:
                if not p._reaches_in_order(m, a):
                    return False
                reads_m = True
    if not reads_m:
        return False
    dag = p.dag
    # no third group between them: f reads m only directly, and m reads nothing of f
    if nx.has_path(dag, id(f), id(m)):
        return False
    return not any(s != id(f) and nx.has_path(dag, s, id(f)) for s in dag.successors(id(m)))


def _anchors(g: GroupDraft) -> list:
    return [n for n in g.nodes if n.target in (aten.mm.default, aten.bmm.default)]


def _sibling_gemm(p, m: GroupDraft, f: GroupDraft) -> bool:
    """Matmul group ``f`` (an ``mm`` and its epilogue) can join matmul group ``m``, whose epilogue
    reads its result, as a second anchor (``lowering/matmul/multi.py``): one output domain of at
    most one PSUM bank of columns, neither GEMM reading the other's values."""
    if f.kind != "matmul" or f.parts or f.domain != m.domain or len(m.domain) != 2 or \
            m.reduce_axes or f.reduce_axes or \
            m.domain[-1] > common_limit("matmul_n_max"):
        return False
    am, af = _anchors(m), _anchors(f)
    if len(am) != 1 or len(af) != 1 or any(a.target is not aten.mm.default for a in am + af):
        return False
    if any(view_root(x) in f.members for x in am[0].args[:2]) or \
            any(view_root(x) in m.members for x in af[0].args[:2]):
        return False
    reads_f = False
    for n in m.nodes:
        for a in n.all_input_nodes:
            if a not in m.members and view_root(a) in f.members:
                if not p._reaches_in_order(f, a):
                    return False
                reads_f = True
    if not reads_f:
        return False
    dag = p.dag
    if nx.has_path(dag, id(m), id(f)):
        return False
    return not any(s != id(m) and nx.has_path(dag, s, id(m)) for s in dag.successors(id(f)))


#: SBUF bytes per partition a GEMM's resident rhs may take when it runs in the row loop of a fused
#: group with rows wider than one PSUM bank or per batch entry (about a seventh of trn1's 176 KiB: the rows
#: themselves take up to 16 KiB per fp32 value, and a batched rhs is double-buffered)
RHS_RESIDENT_BYTES = 24 * 1024


def _rhs_bytes(mm) -> int:
    """SBUF bytes per partition of ``mm``'s rhs held resident as [128, k tiles x N]."""
    b = mm.args[1].meta["val"]
    K, N = int(b.shape[-2]), int(b.shape[-1])
    return math.ceil(K / common_limit("matmul_k_max")) * N * b.element_size()


def _row_reducer(p, m: GroupDraft, f: GroupDraft) -> bool:
    """Fused group ``f`` reduces rows of matmul group ``m``'s output (an RMSNorm after a projection
    and residual add, a softmax of a batched product) and those rows fit the PSUM banks a row tile
    may use: ``m`` runs inside ``f``'s row loop (``lowering/matmul/rows.py``)."""
    from ..lowering.matmul.rows import MAX_BANKS

    if f.kind != "fused" or len(f.reduce_axes) != 1 or len(m.domain) not in (2, 3):
        return False
    (ax,) = f.reduce_axes
    N = m.domain[-1]
    if ax != len(f.domain) - 1 or f.domain[-1] != N or math.prod(f.domain) != math.prod(m.domain) or \
            N > MAX_BANKS * common_limit("matmul_n_max"):
        return False
    am = _anchors(m)
    if len(am) != 1 or am[0].target is not (aten.mm.default if len(m.domain) == 2 else aten.bmm.default):
        return False
    if (N > common_limit("matmul_n_max") or len(m.domain) == 3) and _rhs_bytes(am[0]) > RHS_RESIDENT_BYTES:
        return False   # wide or batched rows: the rhs (per batch entry) must stay resident beside the rows
    reads_m = False
    for n in f.nodes:
        if n.target is aten.copy_.default:
            return False
        for a in n.all_input_nodes:
            if a not in f.members and view_root(a) in m.members:
                if not p._reaches_in_order(m, a):
                    return False
                reads_m = True
    if not reads_m or any(view_root(x) in f.members for x in am[0].args[:2]):
        return False
    if any(n.target not in VIEWS and n is not am[0] and not p._compatible(f, n) for n in m.nodes):
        return False
    return joins_directly(p.dag, m, f)


def joins_directly(dag, producer, consumer) -> bool:
    """Whether ``consumer`` can merge into ``producer``'s group (or the other way round) without a
    cycle: no path back from ``consumer`` to ``producer`` and no third group between them (every
    other successor of ``producer`` must not reach ``consumer``)."""
    if nx.has_path(dag, id(consumer), id(producer)):
        return False
    return not any(s != id(consumer) and nx.has_path(dag, s, id(consumer))
                   for s in dag.successors(id(producer)))


def absorb_into_epilogues(p) -> None:
    """Fold every absorbable fused group into the matmul group whose output it reads (``p``: the
    partitioner, whose groups, ``group_of`` and group DAG are updated in place)."""
    for m in [g for g in p.groups if g.kind == "matmul"]:
        for f in list(p.groups):
            if f is m or f not in p.groups or m not in p.groups:
                continue
            if _row_reducer(p, m, f):
                m.domain, m.reduce_axes, m.col_axes = f.domain, f.reduce_axes, f.col_axes
            elif not (_absorbable(p, m, f) or _sibling_gemm(p, m, f)):
                continue
            p.fold(m, f)
            _take_views(m)


def _take_views(g: GroupDraft) -> None:
    """Views between members (``view(mm_a)`` read by an epilogue op that came from the other
    group) become members, so the kernel computes through them instead of reading HBM."""
    for n in list(g.nodes):
        for a in n.all_input_nodes:
            chain = []
            while a not in g.members and a.op == "call_function" and a.target in VIEWS:
                chain.append(a)
                a = a.args[0]
            if chain and a in g.members:
                g.nodes.extend(chain)
                g.members.update(chain)
