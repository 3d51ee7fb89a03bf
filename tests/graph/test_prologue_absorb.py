"""The partitioner folds the fused group computing a GEMM's lhs (an RMSNorm before a projection)
into the GEMM's group (``graph/prologue_absorb.py``), and only where that GEMM reads nothing else of
the fused group."""
from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from neuron_inductor.graph.decompositions import decomposition_table
from neuron_inductor.graph.fusion import partition
from neuron_inductor.graph.passes import run_passes

aten = torch.ops.aten


def _groups(fn, *shapes, prologues: bool = True):
    args = [torch.empty(s, device="meta") for s in shapes]
    gm = make_fx(lambda *a: (fn(*a),), decomposition_table=decomposition_table(), tracing_mode="fake")(*args)
    return [g for g in partition(run_passes(gm), prologues=prologues) if g.kind in ("fused", "matmul")]


def _norm(x):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5)


def test_norm_before_gemm_joins_its_group():
    (g,) = _groups(lambda x, w: _norm(x) @ w, (256, 64), (64, 32))
    assert g.kind == "matmul" and len(g.parts) == 1
    assert {n.target for n in g.nodes} >= {aten.mm.default, aten.sqrt.default}


def test_norm_read_by_both_operands_stays_apart():
    # the rhs is the fused group's value too: the GEMM reads more of it than its lhs rows
    gs = _groups(lambda x: _norm(x) @ _norm(x).t(), (64, 64))
    mm = next(g for g in gs if any(n.target is aten.mm.default for n in g.nodes))
    assert not any(n.target is aten.sqrt.default for n in mm.nodes)


def test_only_where_the_target_takes_it():
    # the pipeline asks for the fold on trn1 only (its fp32 transposes run on VectorE)
    gs = _groups(lambda x, w: _norm(x) @ w, (256, 64), (64, 32), prologues=False)
    assert len(gs) == 2
