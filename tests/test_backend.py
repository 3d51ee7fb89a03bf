"""The Dynamo backend's contract: options validation, fullgraph/dynamic/no_grad, fallbacks (error
mode, float64), and the debug dump."""
from __future__ import annotations

import pytest
import torch

from neuron_inductor import stats
from neuron_inductor.lowering.graph import FallbackError


def _run(fn, *args, **kw):
    torch._dynamo.reset()
    return torch.compile(fn, backend="neuron", **kw)(*args)


def test_unknown_option_lists_valid_ones():
    with pytest.raises(Exception) as e:
        _run(lambda x: x + 1, torch.ones(3), options={"fuson": False})
    msg = str(e.value)
    assert "fuson" in msg and "fusion" in msg and "fallback" in msg


def test_bad_option_value_names_the_choices():
    with pytest.raises(Exception) as e:
        _run(lambda x: x + 1, torch.ones(3), options={"fallback": "loud"})
    assert "warn" in str(e.value) and "error" in str(e.value)


def _counting_backend(options=None):
    """The neuron backend behind a recorder of the graphs Dynamo hands it (one per compile)."""
    from neuron_inductor.backend import neuron_backend

    graphs: list = []

    def backend(gm, example_inputs):
        graphs.append([getattr(x, "shape", x) for x in example_inputs])
        return neuron_backend(gm, example_inputs, options)
    return backend, graphs


@pytest.mark.parametrize("fullgraph", [True, False])
def test_fullgraph(fullgraph):
    """fullgraph=True compiles one graph; a graph break splits the function into two, both ours."""
    def fn(x):
        y = x.exp()
        if not fullgraph:
            print("graph break", end="")   # a graph break splits into two compiled graphs
        return (y * 2).sum(-1)
    x = torch.randn(300, 130)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    backend, graphs = _counting_backend({"fallback": "error"})
    out = torch.compile(fn, backend=backend, fullgraph=fullgraph)(x)
    torch.testing.assert_close(out, fn(x), atol=1e-4, rtol=1e-5)
    assert len(graphs) == (1 if fullgraph else 2)
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == (0 if fullgraph else 1)


def test_fullgraph_refuses_a_graph_break():
    def fn(x):
        print("graph break", end="")
        return x.exp()
    torch._dynamo.reset()
    with pytest.raises(Exception):
        torch.compile(fn, backend="neuron", fullgraph=True)(torch.randn(4, 4))


@pytest.mark.smoke
def test_dynamic_false_recompiles_per_shape():
    """dynamic=False: one static compile per new shape, none for a shape seen before."""
    torch._dynamo.reset()
    backend, graphs = _counting_backend()
    f = torch.compile(lambda x: torch.tanh(x) + 1, backend=backend, dynamic=False)
    for n in (3, 300, 5, 3, 300):
        x = torch.randn(n, 7)
        torch.testing.assert_close(f(x), torch.tanh(x) + 1)
    assert graphs == [[torch.Size([3, 7])], [torch.Size([300, 7])], [torch.Size([5, 7])]]


@pytest.mark.smoke
def test_no_grad():
    x = torch.randn(300, 130, requires_grad=True)
    with torch.no_grad():
        out = _run(lambda x: torch.sigmoid(x) * x, x, options={"fallback": "error"})
    assert not out.requires_grad
    torch.testing.assert_close(out, torch.sigmoid(x.detach()) * x.detach())


def test_fallback_error_names_the_op():
    with pytest.raises(Exception) as e:
        _run(lambda x: torch.lgamma(x), torch.randn(5, 3), options={"fallback": "error"})
    assert isinstance(e.value, FallbackError) or "FallbackError" in repr(e.value) or \
        isinstance(getattr(e.value, "inner_exception", None), FallbackError)
    assert "lgamma" in str(e.value)


@pytest.mark.smoke
def test_fallback_warn_is_counted_and_correct():
    stats.reset("fallback_ops")
    x = torch.randn(5, 3)
    out = _run(lambda x: torch.lgamma(x.exp()) + 1, x)
    torch.testing.assert_close(out, torch.lgamma(x.exp()) + 1)
    assert any("lgamma" in op for op in stats.fallback_ops())


@pytest.mark.smoke
def test_float64_falls_back_and_is_right():
    stats.reset("fallback_ops")
    x = torch.randn(300, 130, dtype=torch.float64, requires_grad=True)
    out = _run(lambda x: (x.exp() * 3).sum(-1), x)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, (x.exp() * 3).sum(-1))
    assert sum(stats.fallback_ops().values()) > 0


def test_debug_dump_dir(tmp_path):
    dump = tmp_path / "dump"   # tmp_path also holds the per-test compile cache (conftest)
    _run(lambda x: torch.softmax(x, -1), torch.randn(4, 9), options={"debug_dir": str(dump)})
    dirs = [d for d in dump.iterdir() if d.is_dir()]
    assert dirs
    for name in ("graph.txt", "groups.txt", "ir.txt", "kernels.py", "wrapper.py"):
        f = dirs[0] / name
        assert f.exists() and f.stat().st_size > 0, name
    compile(dirs[0].joinpath("kernels.py").read_text(), "kernels.py", "exec")
    compile(dirs[0].joinpath("wrapper.py").read_text(), "wrapper.py", "exec")


def test_debug_dump_env(tmp_path, monkeypatch):
    from neuron_inductor import config
    monkeypatch.setenv("NEURON_INDUCTOR_DEBUG_DIR", str(tmp_path / "dump"))
    config.reset()
    _run(lambda x: x * 2, torch.randn(4))
    assert list((tmp_path / "dump").rglob("kernels.py"))


def test_internal_compiler_error_falls_back_to_eager_graph(monkeypatch, caplog):
    """A compiler bug must not kill a training run: the graph runs eagerly, loudly and counted."""
    import neuron_inductor.lowering as lowering
    from neuron_inductor import stats

    def boom(*a, **k):
        raise RuntimeError("simulated compiler bug")

    monkeypatch.setattr(lowering, "lower_graph", boom)
    stats.reset("compile", "fallback_ops")
    x = torch.randn(5, 7, requires_grad=True)
    f = torch.compile(lambda t: (t.sin() * 2).sum(-1), backend="neuron")
    with caplog.at_level("WARNING", logger="neuron_inductor"):
        out = f(x)
        out.sum().backward()
    torch.testing.assert_close(out, (x.detach().sin() * 2).sum(-1))
    torch.testing.assert_close(x.grad, 2 * x.detach().cos())
    assert stats.compiled()["graph_fallbacks"] == 2  # forward and backward
    assert "simulated compiler bug" in caplog.text


def test_internal_compiler_error_raises_with_fallback_error(monkeypatch):
    import neuron_inductor.lowering as lowering

    def boom(*a, **k):
        raise RuntimeError("simulated compiler bug")

    monkeypatch.setattr(lowering, "lower_graph", boom)
    f = torch.compile(lambda t: t.sin(), backend="neuron", options={"fallback": "error"})
    with pytest.raises(Exception, match="simulated compiler bug"):
        f(torch.randn(3))


def test_pipeline_verifies_the_host_program(monkeypatch):
    """verify_host_program runs on every lowered program (verify_ir on), after kernel verification."""
    from neuron_inductor.ir import verify

    seen = []
    real = verify.verify_host_program
    monkeypatch.setattr(verify, "verify_host_program", lambda p: (seen.append(p.name), real(p)))
    x = torch.randn(130, 9)
    torch.testing.assert_close(_run(lambda x: x.exp() * 3, x, options={"fallback": "error", "cache": False}),
                               x.exp() * 3)
    assert len(seen) == 1


def test_the_pipeline_leaves_the_traced_graph_runnable(monkeypatch):
    """A graph that fails to compile runs eagerly from the graph AOTAutograd traced, so the passes
    rewrite a copy: before, they rewrote it in place and a backward graph whose lowering failed ran
    the rewritten graph, which eager could not run ("view size is not compatible", gemma3n_text)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from neuron_inductor import pipeline
    from neuron_inductor.config import Config

    def f(x, y):  # the two sin(x) are merged by CSE, the permuted copy of the cat is rewritten
        return torch.cat([x.sin(), y], 0).permute(1, 0).clone() + x.sin().sum()

    x, y = torch.randn(3, 4), torch.randn(2, 4)
    gm = make_fx(f)(x, y)
    before = gm.code
    prepared = pipeline.run(pipeline.job_for(gm, Config()), until="passes")
    assert prepared.gm is not gm and prepared.gm.code != before  # the passes did rewrite something
    assert gm.code == before
    torch.testing.assert_close(gm(x, y), f(x, y))
