"""A Diffusers DiT under DTensor tensor parallelism, compiled with the neuron backend, under torchrun.

    torchrun --standalone --nproc_per_node 2 examples/diffusers_tp.py            # 8 sampling steps + a training step
    torchrun --standalone --nproc_per_node 2 examples/diffusers_tp.py --smoke    # 2 sampling steps
                                                                                 # (also: NEURON_INDUCTOR_SMOKE=1)

The model is sharded with torch's public API, ``parallelize_module``: in every joint transformer
block, q/k/v and the text-stream projections are ``ColwiseParallel`` (each rank holds half the
heads), the attention output projections ``RowwiseParallel`` (one all-reduce each), and each MLP
column- then row-parallel. Diffusers' SD3 attention processor splits heads by ``attn.heads``, so each
sharded attention is told its local head count. Then ``torch.compile(model, backend="neuron")``,
unchanged. gloo on CPU stands in for the Neuron collectives; the all-reduces run as declared
collectives in the generated wrapper, and the ranks share one compile cache (each graph compiled by
one rank). Offline: a tiny random ``SD3Transformer2DModel``; the script checks the sharded compiled
latents (and gradients) against the whole model run eagerly on every rank.
"""
import torch
import torch.distributed as dist
from _proof import check_close, eager_twice, report, smoke
from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from neuron_inductor import stats
from neuron_inductor.runtime import host

SMOKE = smoke()
STEPS = 2 if SMOKE else 8


def dit() -> SD3Transformer2DModel:
    torch.manual_seed(0)  # the same weights on every rank
    return SD3Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=8,
        num_attention_heads=4, joint_attention_dim=32, caption_projection_dim=32,
        pooled_projection_dim=16, pos_embed_max_size=8)


def tensor_parallel(model: SD3Transformer2DModel, mesh) -> SD3Transformer2DModel:
    """Shard every joint block's attention and MLP linears over ``mesh``; the rest stays replicated.

    Also the plan ``tests/integrations/_dist_dit_worker.py`` tests."""
    plan = {}
    for i, block in enumerate(model.transformer_blocks):
        p = f"transformer_blocks.{i}"
        for name in ("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"):
            plan[f"{p}.attn.{name}"] = ColwiseParallel()
        plan[f"{p}.attn.to_out.0"] = RowwiseParallel()
        if block.attn.to_add_out is not None:  # the last block drops the text stream's output
            plan[f"{p}.attn.to_add_out"] = RowwiseParallel()
        for ff in ("ff", "ff_context"):
            if getattr(block, ff, None) is not None:
                plan[f"{p}.{ff}.net.0.proj"] = ColwiseParallel()
                plan[f"{p}.{ff}.net.2"] = RowwiseParallel()
    parallelize_module(model, mesh, plan)
    for block in model.transformer_blocks:
        block.attn.heads //= mesh.size()  # the SD3 processor reshapes the local q/k/v by attn.heads
    return model


def sample(model, latents, cond, steps: int = STEPS):
    scheduler = FlowMatchEulerDiscreteScheduler()
    scheduler.set_timesteps(steps)
    with torch.no_grad():
        for t in scheduler.timesteps:
            pred = model(hidden_states=latents, timestep=t.expand(latents.shape[0]), **cond).sample
            latents = scheduler.step(pred, t, latents).prev_sample
    return latents


def full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    g = torch.Generator().manual_seed(0)  # the same inputs on every rank
    latents, target = torch.randn(2, 4, 8, 8, generator=g), torch.randn(2, 4, 8, 8, generator=g)
    cond = dict(encoder_hidden_states=torch.randn(2, 5, 32, generator=g),
                pooled_projections=torch.randn(2, 16, generator=g))
    eager, model = dit(), tensor_parallel(dit(), mesh)
    compiled = torch.compile(model, backend="neuron")  # the one-line change
    want, spread = eager_twice(lambda: sample(dit(), latents, cond))
    got = full(sample(compiled, latents, cond))
    check_close(f"rank {rank}: latents", got, want, spread, floor=1e-5)
    msg = f"rank {rank}: {STEPS} sampling steps, latents match the whole model's"
    if not SMOKE:
        losses = []
        for m in (eager, compiled):
            loss = torch.nn.functional.mse_loss(m(hidden_states=latents, timestep=torch.tensor([100.0, 700.0]),
                                                  **cond).sample, target)
            loss.backward()
            losses.append(full(loss.detach()))
        torch.testing.assert_close(losses[1], losses[0], rtol=1e-4, atol=1e-5)
        for (name, p), q in zip(eager.named_parameters(), model.parameters()):
            torch.testing.assert_close(full(q.grad), p.grad, rtol=1e-4, atol=1e-5, msg=name)
        msg += f"; training step loss {losses[1].item():.4f} and every gradient match"
    assert not stats.fallback_ops(), dict(stats.fallback_ops())
    print(f"{msg}; collectives {host.collective_counts()}", flush=True)
    report(f"rank {rank}: ")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
