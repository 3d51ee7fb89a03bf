"""torchrun worker: a tiny SD3 DiT under DTensor tensor parallelism (2 gloo ranks), compiled.

argv: OUT_DIR. Every rank builds the same tiny ``SD3Transformer2DModel`` twice (same seed): one stays
whole and runs eager (the single-process reference), the other is sharded with
``parallelize_module`` -- q/k/v and the context projections ``ColwiseParallel`` (each rank gets half
the heads), the attention output projections and the feed-forward down projections ``RowwiseParallel``
(an all-reduce), the feed-forward up projections ``ColwiseParallel`` -- and compiled with
``backend="neuron"``. The adaptive norms, embeddings and ``proj_out`` stay replicated. Diffusers'
``JointAttnProcessor2_0`` splits heads with ``attn.heads``, so each sharded attention is told its local
head count (the torchtitan convention for TP attention). A 3-step flow-matching denoising loop and one
training step (MSE loss, every gradient gathered with ``full_tensor``) are compared with the
reference here; rank<N>.json records the counters the test checks.
"""
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _diffusers import dit_inputs, tiny_dit  # noqa: E402

TOL = dict(rtol=1e-4, atol=1e-5)


def tp_plan(model) -> dict:
    """Module path -> style for every linear inside the joint transformer blocks' attention and MLPs."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    plan = {}
    for i, block in enumerate(model.transformer_blocks):
        p = f"transformer_blocks.{i}"
        for name in ("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"):
            plan[f"{p}.attn.{name}"] = ColwiseParallel()
        plan[f"{p}.attn.to_out.0"] = RowwiseParallel()
        if block.attn.to_add_out is not None:
            plan[f"{p}.attn.to_add_out"] = RowwiseParallel()
        for ff in ("ff", "ff_context"):
            if getattr(block, ff, None) is not None:
                plan[f"{p}.{ff}.net.0.proj"] = ColwiseParallel()
                plan[f"{p}.{ff}.net.2"] = RowwiseParallel()
    return plan


def shard(model, mesh):
    from torch.distributed.tensor.parallel import parallelize_module
    parallelize_module(model, mesh, tp_plan(model))
    for block in model.transformer_blocks:
        block.attn.heads //= mesh.size()  # the processor reshapes the local q/k/v by attn.heads
    return model


def denoise(model, latents, cond) -> torch.Tensor:
    from diffusers import FlowMatchEulerDiscreteScheduler
    sched = FlowMatchEulerDiscreteScheduler()
    sched.set_timesteps(3)
    with torch.no_grad():
        for t in sched.timesteps:
            pred = model(hidden_states=latents, timestep=t.expand(latents.shape[0]), **cond).sample
            latents = sched.step(pred, t, latents).prev_sample
    return latents


def full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def main() -> None:
    out = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    from torch.distributed.device_mesh import init_device_mesh
    from neuron_inductor import stats
    from neuron_inductor.runtime import host

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    g = torch.Generator().manual_seed(0)  # the same inputs on every rank, as TP needs
    latents, cond = torch.randn(2, 4, 8, 8, generator=g), dit_inputs(g)
    x, target = torch.randn(2, 4, 8, 8, generator=g), torch.randn(2, 4, 8, 8, generator=g)
    t = torch.tensor([100.0, 700.0])
    options = {"fallback": "error"}
    result = {"rank": rank}

    # inference: the denoising loop, one compiled graph for every step
    ref, tp = tiny_dit().eval(), shard(tiny_dit().eval(), mesh)
    want = denoise(ref, latents, cond)
    torch._dynamo.reset()
    stats.reset("compile", "fallback_ops")
    got = denoise(torch.compile(tp, backend="neuron", options=options), latents, cond)
    torch.testing.assert_close(full(got), want, **TOL)
    assert not torch.equal(want, latents)
    result["infer_graphs"] = stats.compiled()["graphs_compiled"]
    result["infer_fallbacks"] = dict(stats.fallback_ops())

    # training: one step's loss and every gradient
    ref, tp = tiny_dit(), shard(tiny_dit(), mesh)
    torch._dynamo.reset()
    stats.reset("compile", "fallback_ops")
    host.reset_collective_counts()
    compiled = torch.compile(tp, backend="neuron", options=options)
    losses = []
    for m in (ref, compiled):
        loss = torch.nn.functional.mse_loss(m(hidden_states=x, timestep=t, **cond).sample, target)
        loss.backward()
        losses.append(full(loss.detach()))
    torch.testing.assert_close(losses[1], losses[0], **TOL)
    n_sharded = 0
    for (name, p), q in zip(ref.named_parameters(), tp.parameters()):
        assert p.grad is not None and q.grad is not None, name
        n_sharded += hasattr(q.grad, "full_tensor") and q.grad.placements[0].is_shard()
        torch.testing.assert_close(full(q.grad), p.grad, **TOL, msg=name)
    result.update(train_graphs=stats.compiled()["graphs_compiled"], train_fallbacks=dict(stats.fallback_ops()),
                  collectives=host.collective_counts(), sharded_grads=int(n_sharded),
                  loss=float(losses[1]), misses=stats.cache()["misses"], hits=stats.cache()["hits"])
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
