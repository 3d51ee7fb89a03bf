"""Diffusers on the neuron backend: sample with a DiT and a UNet, and take a training step.

    python examples/diffusers_sampling.py            # DiT and UNet, 8 sampling steps, 1 training step each
    python examples/diffusers_sampling.py --smoke    # 2 sampling steps; training step for the DiT only
                                                     # (also: NEURON_INDUCTOR_SMOKE=1)

The change from an ordinary Diffusers script is one line, ``torch.compile(model, backend="neuron")``
(on a Trainium host ``torch.compile(model)`` alone picks it). The rest is what a pipeline does: a
scheduler (``FlowMatchEulerDiscreteScheduler`` for the DiT, ``DDIMScheduler`` for the UNet) steps the
latents with the model's prediction; the timestep goes in as a tensor, so every step reuses one
compiled graph. Everything the models compute runs as generated kernels: convolutions as im2col
matmuls on TensorE, group norm as reductions, nearest upsampling as gathers, sin/cos timestep
embeddings, attention. Offline: tiny random ``SD3Transformer2DModel`` and ``UNet2DConditionModel``
configs and random text embeddings stand in for checkpoints and a text encoder. The script checks the
compiled latents, loss and gradients against eager, within a few times eager's own spread (eager
on one thread and on several: the UNet's latents move by about 3e-5 between the two).
"""
import torch
from _proof import check_close, eager_twice, report, smoke
from diffusers import (DDIMScheduler, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel,
                       UNet2DConditionModel)

from neuron_inductor import stats

SMOKE = smoke()
STEPS = 2 if SMOKE else 8


def dit() -> SD3Transformer2DModel:
    torch.manual_seed(0)
    return SD3Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=8,
        num_attention_heads=4, joint_attention_dim=32, caption_projection_dim=32,
        pooled_projection_dim=16, pos_embed_max_size=8)


def unet() -> UNet2DConditionModel:
    torch.manual_seed(0)
    return UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(16, 32),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), mid_block_type=None,
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8)


def predict(model, latents, t, cond):
    if isinstance(model, SD3Transformer2DModel) or isinstance(getattr(model, "_orig_mod", None),
                                                              SD3Transformer2DModel):
        return model(hidden_states=latents, timestep=t, **cond).sample
    return model(latents, t, **cond).sample


def sample(model, scheduler, latents, cond):
    scheduler.set_timesteps(STEPS)
    with torch.no_grad():
        for t in scheduler.timesteps:
            pred = predict(model, latents, t.expand(latents.shape[0]), cond)
            latents = scheduler.step(pred, t, latents).prev_sample
    return latents


def train_step(model, latents, t, cond, target):
    loss = torch.nn.functional.mse_loss(predict(model, latents, t, cond), target)
    loss.backward()
    return loss.detach()


def main() -> None:
    g = torch.Generator().manual_seed(0)
    latents, target = torch.randn(2, 4, 8, 8, generator=g), torch.randn(2, 4, 8, 8, generator=g)
    text = torch.randn(2, 5, 32, generator=g)
    runs = [("DiT (SD3Transformer2DModel)", dit, FlowMatchEulerDiscreteScheduler,
             dict(encoder_hidden_states=text, pooled_projections=torch.randn(2, 16, generator=g)),
             torch.tensor([100.0, 700.0])),
            ("UNet2DConditionModel", unet, DDIMScheduler, dict(encoder_hidden_states=text),
             torch.tensor([100, 700]))]
    for name, build, sched, cond, t in runs:
        model = build()
        stats.reset("compile", "fallback_ops")
        compiled = torch.compile(model, backend="neuron")  # the one-line change
        want, spread = eager_twice(lambda: sample(build(), sched(), latents, cond))
        got = sample(compiled, sched(), latents, cond)
        check_close(f"{name}: latents after {STEPS} sampling steps", got, want, spread, floor=1e-5)
        if SMOKE and build is unet:  # the UNet's training step is tests/integrations/test_diffusers.py
            report(f"{name}: ")
            assert not stats.fallback_ops()
            continue

        def eager_step():
            eager = build()
            loss = train_step(eager, latents, t, cond, target)
            return loss, {n: p.grad for n, p in eager.named_parameters()}
        (loss_e, grads_e), spread = eager_twice(eager_step)
        loss_c = train_step(compiled, latents, t, cond, target)
        grads_c = {n: p.grad for n, p in model.named_parameters()}
        check_close(f"{name}: training step loss {loss_c.item():.4f} and every gradient", (loss_c, grads_c),
                    (loss_e, grads_e), spread, floor=1e-5)
        report(f"{name}: ")
        assert not stats.fallback_ops()
    print("diffusers models match eager: sampling and training")


if __name__ == "__main__":
    main()
