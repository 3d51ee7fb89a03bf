"""Symbolic Dynamo graphs are specialised per concrete shape, with the same keys as static captures."""
import pytest
import torch
import torch.fx as fx

from neuron_inductor import stats as ni_stats
from neuron_inductor import dynamic
from neuron_inductor.cache import reset_stats, stats


def f(x, w):
    return torch.relu(x @ w) + x.shape[0]


def test_specialize_graph_drops_symbolic_inputs():
    g = fx.Graph()
    s = g.placeholder("s0")
    x = g.placeholder("x")
    g.output(g.call_function(torch.add, (x, s)))
    gm = fx.GraphModule(torch.nn.Module(), g)
    static = dynamic.specialize_graph(gm, [0], [5, torch.zeros(3)])
    assert [n.name for n in static.graph.nodes if n.op == "placeholder"] == ["x"]
    assert torch.equal(static(torch.zeros(3)), torch.full((3,), 5.0))
    with pytest.raises(TypeError, match="concrete"):
        dynamic.specialize_graph(gm, [0], [torch.zeros(1), torch.zeros(3)])
    with pytest.raises(ValueError, match="2 inputs"):
        dynamic.specialize_graph(gm, [0], [5])


def test_automatic_dynamic_compiles_each_shape_once():
    """The first shape is captured statically, later ones through the symbolic graph; seeing the
    first shape again through the symbolic graph must be a cache hit, not a second compile."""
    reset_stats()
    ni_stats.reset("compile", "fallback_ops")
    w = torch.randn(16, 8)
    cf = torch.compile(f, backend="neuron")
    for n in (8, 24, 8, 40, 24):
        x = torch.randn(n, 16)
        torch.testing.assert_close(cf(x, w), f(x, w))
    s = stats()
    assert s["misses"] == 3 and ni_stats.compiled()["graphs_compiled"] == 3
    assert s["hits_memory"] == 1  # n=8 via the symbolic graph reused the static capture's entry


def test_many_shapes_warn_once(monkeypatch):
    monkeypatch.setattr(dynamic, "MANY_SHAPES", 2)
    w = torch.randn(16, 3)  # no size shared with x's rows: Dynamo's duck sizing keeps one graph
    cf = torch.compile(f, backend="neuron", dynamic=True)
    cf(torch.randn(5, 16), w)
    cf(torch.randn(6, 16), w)
    with pytest.warns(UserWarning, match="3 distinct input shapes"):
        cf(torch.randn(7, 16), w)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cf(torch.randn(9, 16), w)


def test_training_compiles_forward_and_backward_once_per_shape():
    reset_stats()
    w = torch.randn(16, 3, requires_grad=True)

    def loss(x, w):
        return (torch.relu(x @ w) * 2).sum()

    cf = torch.compile(loss, backend="neuron")
    for n in (8, 24, 8, 40, 24):
        x = torch.randn(n, 16)
        w.grad = None
        cf(x, w).backward()
        g = w.grad.clone()
        w.grad = None
        loss(x, w).backward()
        torch.testing.assert_close(g, w.grad)
    s = stats()
    assert s["misses"] == 6  # 3 shapes x (forward, backward)
    assert s["hits_memory"] == 2  # n=8 through the symbolic graph: both reuse the static entries
