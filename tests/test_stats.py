"""neuron_inductor.stats: every counter behind one API, fed by the stages that do the work."""
from __future__ import annotations

import pytest
import torch

from neuron_inductor import pipeline, stats
from neuron_inductor.config import get_config


def _compile(fn, *args):
    torch._dynamo.reset()
    return torch.compile(fn, backend="neuron")(*args)


def test_a_compile_counts_graphs_kernels_and_a_cache_miss():
    stats.reset()
    x = torch.randn(130, 9)
    torch.testing.assert_close(_compile(lambda a: a.exp() * 2, x), x.exp() * 2)
    c = stats.compiled()
    assert c["graphs_compiled"] == 1 and c["kernels_generated"] == 1 and c["aten_ops"] >= 2
    assert stats.cache()["misses"] == 1 and stats.cache()["hits"] == 0
    assert stats.fallback_ops() == {}
    assert stats.host_calls() == {"fallbacks": {}, "collectives": {}, "boundary_copies": {}}
    _compile(lambda a: a.exp() * 2, x)  # same graph and shapes: served by the cache
    assert stats.compiled()["graphs_compiled"] == 1 and stats.cache()["hits"] == 1


def test_declared_fallbacks_are_counted_at_compile_and_at_run_time():
    stats.reset()
    x = torch.randn(6, 5, dtype=torch.float64)
    f = torch.compile(lambda a: a.exp() + 1, backend="neuron")
    for _ in range(3):
        torch.testing.assert_close(f(x), x.exp() + 1)
    found = stats.fallback_ops()
    assert found and all(n == 1 for n in found.values()), found  # one compile
    run = stats.host_calls()["fallbacks"]
    assert set(run) == set(found), (run, found)
    assert sum(run.values()) == 3 * sum(found.values()), (run, found)  # every call of each op


def test_summary_names_what_the_backend_did():
    stats.reset()
    assert stats.summary().startswith("graphs compiled 0 (cache hits 0), kernels generated 0")
    stats.record_compile(graphs_compiled=2, kernels_generated=5, aten_ops=40)
    stats.record_fallback_op("aten.sort.default")
    line = stats.summary()
    assert "graphs compiled 2" in line and "kernels generated 5 from 40 ATen ops" in line
    assert line.endswith("declared fallback ops: aten.sort.default x1"), line
    stats.reset()


def test_snapshots_are_copies_and_reset_takes_sections():
    stats.reset()
    stats.record_compile(graphs_compiled=2)
    stats.record_cache("bypasses", reason="disabled")
    snap = stats.snapshot()
    assert set(snap) == set(stats.SECTIONS)
    snap["compile"]["graphs_compiled"] = 99
    assert stats.compiled()["graphs_compiled"] == 2
    assert stats.cache()["bypasses"] == {"disabled": 1} and stats.cache()["bypassed"] == 1
    stats.reset("cache")
    assert stats.cache()["bypassed"] == 0 and stats.compiled()["graphs_compiled"] == 2
    with pytest.raises(ValueError, match="unknown stats sections"):
        stats.reset("compiles")


def test_cache_stats_reads_the_one_store():
    """``cache.stats()`` reads the same facts as ``stats.cache()``; ``compile`` keeps no counters
    of its own (the counters live in ``stats`` only)."""
    from neuron_inductor import compile as nic
    from neuron_inductor.cache import stats as cache_stats

    stats.reset()
    stats.record_cache("misses")
    assert cache_stats()["misses"] == stats.cache()["misses"] == 1
    assert not [n for n in ("counters", "fallback_ops", "reset_counters") if hasattr(nic, n)]


def test_running_a_pipeline_prefix_counts_nothing():
    from torch.fx.experimental.proxy_tensor import make_fx

    stats.reset()
    gm = make_fx(lambda a: ((a.sin() * 3).sum(-1),))(torch.randn(4, 8))  # AOT graphs return tuples
    lowered = pipeline.run(pipeline.job_for(gm, get_config().replace(cache=False), "prefix"), until="lower")
    assert isinstance(lowered, pipeline.Lowered) and len(lowered.lowered.program.kernels) == 1
    assert stats.snapshot()["compile"] == {}
