"""Our backend compiles with the cyclic garbage collector paused (full collections of the whole
process heap, triggered by the pipeline's allocations, were a third of its time) and leaves it as it
found it."""
from __future__ import annotations

import gc

import torch

from neuron_inductor import pipeline


def test_pipeline_runs_without_cyclic_gc_and_gc_is_restored(monkeypatch, tmp_path):
    monkeypatch.setenv("NEURON_INDUCTOR_CACHE_DIR", str(tmp_path))
    seen: list[bool] = []
    run = pipeline.run

    def spy(job, until=None):
        seen.append(gc.isenabled())
        return run(job, until)
    monkeypatch.setattr(pipeline, "run", spy)
    assert gc.isenabled()
    torch._dynamo.reset()
    fn = torch.compile(lambda x: torch.sin(x) * 2 + 1, backend="neuron")
    x = torch.randn(5, 7)
    torch.testing.assert_close(fn(x), torch.sin(x) * 2 + 1)
    assert seen and not any(seen)
    assert gc.isenabled()
