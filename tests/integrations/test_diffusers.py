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

import pytest
import torch

pytest.importorskip("diffusers")

from neuron_inductor import stats  # noqa: E402

pytestmark = pytest.mark.slow
FP32 = dict(rtol=1e-4, atol=1e-5)
OPTIONS = {"fallback": "error"}


def tiny_dit(seed: int = 0):
    from diffusers import SD3Transformer2DModel
    torch.manual_seed(seed)
    return SD3Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=8,
        num_attention_heads=4, joint_attention_dim=32, caption_projection_dim=32,
        pooled_projection_dim=16, pos_embed_max_size=8)


def tiny_unet(seed: int = 0):
    from diffusers import UNet2DConditionModel
    torch.manual_seed(seed)
    return UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(16, 32),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), mid_block_type=None,
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8)


def _dit_inputs(g: torch.Generator) -> dict:
    return dict(encoder_hidden_states=torch.randn(2, 5, 32, generator=g),
                pooled_projections=torch.randn(2, 16, generator=g))


def _unet_inputs(g: torch.Generator) -> dict:
    return dict(encoder_hidden_states=torch.randn(2, 5, 32, generator=g))


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
