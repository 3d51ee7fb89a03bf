"""Merging equal nodes must not merge equal *outputs*: two fresh tensors that compute the same value
are still two tensors. A static KV cache that lazily allocates one ``torch.zeros(())`` step counter
per layer and bumps each by the prompt length got one shared counter back, so every later decode
step added the length once per layer and the cache write ran past the end of the buffer."""
from __future__ import annotations

import torch
import torch.fx as fx

from neuron_inductor.graph.passes import common_subexpression_elimination

aten = torch.ops.aten


def _two_counters(x):
    a = torch.zeros((), dtype=torch.long)
    a.add_(x.shape[0])
    b = torch.zeros((), dtype=torch.long)
    b.add_(x.shape[0])
    return a, b, x * 2, x * 2


def test_compiled_equal_fresh_outputs_are_distinct_tensors():
    x = torch.randn(16, 8)
    with torch.no_grad():
        a, b, y, z = torch.compile(_two_counters, backend="neuron", dynamic=False)(x)
    assert a.item() == b.item() == 16
    a.add_(1)  # what the next decode step does to one layer's counter
    assert b.item() == 16
    y.add_(1)
    torch.testing.assert_close(z, x * 2)


def test_cse_clones_a_merged_output_but_keeps_a_shared_one():
    g = fx.Graph()
    x = g.placeholder("x")
    m1 = g.call_function(aten.mul.Tensor, (x, 2))
    m2 = g.call_function(aten.mul.Tensor, (x, 2))
    g.output((m1, m2, m1))  # m1 twice on purpose: that aliasing is the program's own
    gm = fx.GraphModule(torch.nn.Module(), g)
    common_subexpression_elimination(gm)
    outs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    assert outs[0] is outs[2]
    assert outs[1] is not outs[0] and outs[1].target is aten.clone.default and outs[1].args[0] is outs[0]
    assert sum(n.target is aten.mul.Tensor for n in gm.graph.nodes) == 1
