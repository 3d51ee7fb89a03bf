"""Group merging (one HBM read per fused group): a norm's backward is one kernel — producers
in several groups are folded together, sibling groups reading the same tensor too, a broadcast of a
row statistic is computed through, and the weight-gradient sum over rows rides along as a column sum.
A merged group that cannot be lowered falls back to the groups it was merged from, in order."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

import neuron_inductor.lowering  # noqa: F401  (registers lowerings; imported before graph.fusion)
from neuron_inductor.graph.decompositions import decomposition_table
from neuron_inductor.graph.fusion import partition, unmerge
from neuron_inductor.graph.passes import run_passes


def _backward_graph(fn, *shapes):
    graphs = {}

    def bw(gm, ex):
        graphs["bw"] = gm
        return make_boxed_func(gm)
    backend = aot_autograd(fw_compiler=lambda gm, ex: make_boxed_func(gm), bw_compiler=bw, decompositions=decomposition_table())
    torch._dynamo.reset()
    xs = [torch.randn(s, requires_grad=True) for s in shapes]
    y = torch.compile(fn, backend=backend)(*xs)
    y.backward(torch.randn_like(y))
    return run_passes(graphs["bw"])


def _rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _fused(groups):
    return [g for g in groups if g.kind == "fused"]


def test_rmsnorm_backward_is_one_group_with_a_column_sum():
    gm = _backward_graph(_rmsnorm, (256, 1024), (1024,))
    groups = _fused(partition(gm))
    assert len(groups) == 1, [[n.name for n in g.nodes] for g in groups]
    g = groups[0]
    assert g.reduce_axes == frozenset({1}) and g.col_axes == frozenset({0})
    assert any(n.target is torch.ops.aten.expand.default for n in g.nodes)  # computed through


def test_layernorm_backward_is_one_group():
    gm = _backward_graph(lambda x, w, b: F.layer_norm(x, (64,), w, b), (4, 32, 64), (64,), (64,))
    groups = _fused(partition(gm))
    assert len(groups) == 1
    assert groups[0].col_axes == frozenset({0, 1})


def test_without_fusion_nothing_merges():
    gm = _backward_graph(_rmsnorm, (256, 1024), (1024,))
    assert all(not g.parts for g in partition(gm, fusion=False))


def test_unmerge_gives_the_merged_groups_in_dependency_order():
    gm = _backward_graph(_rmsnorm, (256, 1024), (1024,))
    (g,) = _fused(partition(gm))
    parts = unmerge(g)
    assert len(parts) == len(g.parts) + 1
    assert sorted(n.name for p in parts for n in p.nodes) == sorted(n.name for n in g.nodes)
    done = set()
    for p in parts:  # every member a part reads from another part was produced earlier
        for n in p.nodes:
            for a in n.all_input_nodes:
                owner = next((q for q in parts if a in q.members), None)
                assert owner is None or owner is p or id(owner) in done
        done.add(id(p))
        assert p.outputs, [n.name for n in p.nodes]
