"""Diffusers models on the neuron backend: a denoising loop and a training step match eager.

A tiny DiT (``SD3Transformer2DModel``: patch-embedding conv, AdaLayerNorm, joint attention, sin/cos
timestep embeddings) and a tiny ``UNet2DConditionModel`` (3x3 convs with stride 1 and 2, group norm,
nearest upsampling, cross attention), random weights from small configs. Each runs a 3-step
denoising loop with a Diffusers scheduler, compiled and eager from the same latents (the compiled
model is one inference graph, compiled once for every step), and one training step (MSE against
a target, every parameter's gradient compared). ``fallback="error"`` makes any op without a kernel
fail the compile, and the counters confirm no op ran on the host. fp32 tolerances: the simulator
computes in fp32 like eager, so only summation order differs (convs as one long matmul
contraction).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("diffusers")

from neuron_inductor import stats  # noqa: E402
from _diffusers import dit_inputs as _dit_inputs  # noqa: E402
from _diffusers import tiny_dit, tiny_unet  # noqa: E402
from _diffusers import unet_inputs as _unet_inputs  # noqa: E402

pytestmark = pytest.mark.slow
FP32 = dict(rtol=1e-4, atol=1e-5)
OPTIONS = {"fallback": "error"}


def _denoise(model, scheduler, latents: torch.Tensor, cond: dict, dit: bool) -> torch.Tensor:
    """A plain sampling loop (what a Diffusers pipeline does around the model)."""
    with torch.no_grad():
        for t in scheduler.timesteps:
            tt = t.expand(latents.shape[0])  # a tensor: one graph for every step
            if dit:
                pred = model(hidden_states=latents, timestep=tt, **cond).sample
            else:
                pred = model(latents, tt, **cond).sample
            latents = scheduler.step(pred, t, latents).prev_sample
    return latents


def _scheduler(dit: bool):
    from diffusers import DDIMScheduler, FlowMatchEulerDiscreteScheduler
    s = FlowMatchEulerDiscreteScheduler() if dit else DDIMScheduler()
    s.set_timesteps(3)
    return s


@pytest.mark.parametrize("arch", ["dit", "unet"])
def test_denoising_loop_matches_eager_in_one_graph(arch):
    dit = arch == "dit"
    model = (tiny_dit if dit else tiny_unet)().eval()
    g = torch.Generator().manual_seed(0)
    latents = torch.randn(2, 4, 8, 8, generator=g)
    cond = (_dit_inputs if dit else _unet_inputs)(g)
    want = _denoise(model, _scheduler(dit), latents, cond, dit)
    torch._dynamo.reset()
    stats.reset("compile", "fallback_ops")
    got = _denoise(torch.compile(model, backend="neuron", options=OPTIONS), _scheduler(dit), latents,
                   cond, dit)
    torch.testing.assert_close(got, want, **FP32)
    assert not torch.equal(want, latents)  # the loop moved the latents
    assert stats.compiled()["graphs_compiled"] == 1 and not stats.fallback_ops(), dict(stats.fallback_ops())


@pytest.mark.parametrize("arch", ["dit", "unet"])
def test_training_step_grads_match_eager(arch):
    dit = arch == "dit"
    eager, model = [(tiny_dit if dit else tiny_unet)() for _ in range(2)]
    g = torch.Generator().manual_seed(1)
    x, target = torch.randn(2, 4, 8, 8, generator=g), torch.randn(2, 4, 8, 8, generator=g)
    cond = (_dit_inputs if dit else _unet_inputs)(g)
    t = torch.tensor([100.0, 700.0]) if dit else torch.tensor([100, 700])
    torch._dynamo.reset()
    stats.reset("compile", "fallback_ops")
    compiled = torch.compile(model, backend="neuron", options=OPTIONS)
    losses = []
    for m in (eager, compiled):
        out = m(hidden_states=x, timestep=t, **cond).sample if dit else m(x, t, **cond).sample
        loss = torch.nn.functional.mse_loss(out, target)
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[1], losses[0], **FP32)
    n = 0
    for (name, p), q in zip(eager.named_parameters(), model.parameters()):
        if p.grad is not None:
            n += 1
            torch.testing.assert_close(q.grad, p.grad, **FP32, msg=name)
        else:
            assert q.grad is None, name
    assert n > 0
    assert stats.compiled()["graphs_compiled"] == 2 and not stats.fallback_ops(), dict(stats.fallback_ops())


def test_dit_tensor_parallel_on_two_ranks(tmp_path):
    """torchrun, 2 gloo ranks: the DiT sharded with ``parallelize_module`` (attention heads and MLP
    hidden split across ranks, ``_dist_dit_worker.py``) and compiled gives the whole model's eager
    latents, loss and gradients on every rank; the row-parallel all-reduces run as declared
    collectives, nothing falls back, and the ranks sharing one cache dir compile each graph once."""
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_INDUCTOR_", "_NEURON"))}
    env.update(NEURON_INDUCTOR_CACHE_DIR=str(cache), OMP_NUM_THREADS="1")
    worker = Path(__file__).with_name("_dist_dit_worker.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(worker), str(tmp_path)]
    res = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    ranks = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank*.json"))]
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    # the ranks share the cache: each graph (inference; training forward + backward) is built by
    # one rank and loaded by the other
    assert sum(r["infer_graphs"] for r in ranks) == 1 and sum(r["train_graphs"] for r in ranks) == 2
    for r in ranks:
        assert r["infer_fallbacks"] == {} and r["train_fallbacks"] == {}, r
        assert r["collectives"].get("_c10d_functional.all_reduce.default", 0) >= 1, r
        assert r["sharded_grads"] > 0, r
    # ATen-level entries (the Dynamo-level tier's entries hold a plan.json and no kernels)
    entries = sum(1 for m in cache.rglob("manifest.json") if not (m.parent / "plan.json").exists())
    assert sum(r["misses"] for r in ranks) == entries > 0
