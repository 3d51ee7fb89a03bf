"""torchrun worker: a tiny SD3 DiT under DTensor tensor parallelism (2 gloo ranks), compiled.

argv: OUT_DIR. Every rank builds the same tiny ``SD3Transformer2DModel`` twice (same seed): one stays
whole and runs eager (the single-process reference), the other is sharded with
``parallelize_module`` -- q/k/v and the context projections ``ColwiseParallel`` (each rank gets half
the heads), the attention output projections and the feed-forward down projections ``RowwiseParallel``
(an all-reduce), the feed-forward up projections ``ColwiseParallel`` -- and compiled with
``backend="neuron"`` (the plan is ``examples/diffusers_tp.py``'s). The adaptive norms, embeddings and ``proj_out`` stay replicated. Diffusers'
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "examples")]
from _diffusers import dit_inputs, tiny_dit  # noqa: E402
from diffusers_tp import full, sample, tensor_parallel  # noqa: E402  (the example's plan is what is tested)

TOL = dict(rtol=1e-4, atol=1e-5)


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
    ref, tp = tiny_dit().eval(), tensor_parallel(tiny_dit().eval(), mesh)
    want = sample(ref, latents, cond, steps=3)
    torch._dynamo.reset()
    stats.reset("compile", "fallback_ops")
    got = sample(torch.compile(tp, backend="neuron", options=options), latents, cond, steps=3)
    torch.testing.assert_close(full(got), want, **TOL)
    assert not torch.equal(want, latents)
    result["infer_graphs"] = stats.compiled()["graphs_compiled"]
    result["infer_fallbacks"] = dict(stats.fallback_ops())

    # training: one step's loss and every gradient
    ref, tp = tiny_dit(), tensor_parallel(tiny_dit(), mesh)
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
