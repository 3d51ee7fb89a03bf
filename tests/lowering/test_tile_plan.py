"""The fused tile plan is computed once and read only; the emitter follows it."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from neuron_inductor.config import Config
from neuron_inductor.graph.passes import run_passes
from neuron_inductor.lowering.fused import emitter as fused
from neuron_inductor.pipeline import partition_and_lower


def _plans(monkeypatch, fn, *args, **cfg) -> list:
    plans, real = [], fused.plan_tiles

    def spy(*a, **k):
        plans.append(real(*a, **k))
        return plans[-1]
    monkeypatch.setattr(fused, "plan_tiles", spy)
    lg = partition_and_lower(run_passes(make_fx(fn)(*args)), Config(fallback="error", **cfg))
    return plans, lg


def _softmax(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return (e / e.sum(-1, keepdim=True),)


def test_softmax_plan_single_pass_and_read_only(monkeypatch):
    plans, lg = _plans(monkeypatch, _softmax, torch.randn(3, 300, 96))
    (tp,) = plans
    # rows [900] on partitions (ragged tiles of 128), the 96 reduced elements on the free axis, whole
    assert (tp.D, tp.P, tp.F, tp.fc, tp.single, tp.accumulate) == ((900, 96), 0, 1, 96, True, False)
    assert lg.program.kernels[0].plan.startswith(tp.describe(128))
    with pytest.raises(dataclasses.FrozenInstanceError):
        tp.F = 0
    with pytest.raises(TypeError):
        tp.loads[next(iter(tp.loads))] = (0, 0)  # mappings are read-only views
    assert all(isinstance(st, tuple) for st in tp.node_strides.values())


def test_chunked_sum_accumulates(monkeypatch):
    plans, _ = _plans(monkeypatch, lambda x: (x.sum(-1),), torch.randn(200, 5000), free_chunk=1024)
    (tp,) = plans
    assert (tp.fsize, tp.fc, tp.nchunks, tp.single, tp.accumulate) == (5000, 1024, 5, False, True)
