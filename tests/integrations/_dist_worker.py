"""Run under ``torchrun --nproc_per_node 2`` (gloo, CPU): DDP, FSDP2 and DTensor tensor-parallel models
compiled with backend="neuron" against the same models uncompiled. Prints one JSON line per rank."""
from __future__ import annotations

import copy
import json
import sys

import torch
import torch.distributed as dist
import torch.nn as nn


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 8)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def step(model, x, fwd=None):
    loss = ((model if fwd is None else fwd)(x) ** 2).mean()
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


def full(t):
    from torch.distributed.tensor import DTensor
    return t.full_tensor() if isinstance(t, DTensor) else t


def check(kind: str, compiled, eager, x) -> None:
    le, ge = step(eager, x)
    lc, gc = step(compiled, x, torch.compile(compiled, backend="neuron"))
    torch.testing.assert_close(full(lc), full(le), rtol=1e-5, atol=1e-5)
    for n in ge:
        torch.testing.assert_close(full(gc[n]), full(ge[n]), rtol=1e-5, atol=1e-5, msg=f"{kind} {n}")


def main(kinds: list[str]) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    base = MLP()
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(rank))
    for kind in kinds:
        torch._dynamo.reset()
        a, b = copy.deepcopy(base), copy.deepcopy(base)
        if kind == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP
            check(kind, DDP(a), DDP(b), x)
        elif kind == "fsdp2":
            from torch.distributed.fsdp import fully_shard
            for m in (a, b):
                fully_shard(m.up)
                fully_shard(m)
            check(kind, a, b, x)
        elif kind == "tp":
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                           parallelize_module)
            mesh = init_device_mesh("cpu", (dist.get_world_size(),))
            plan = {"up": ColwiseParallel(), "down": RowwiseParallel()}
            xs = torch.randn(4, 16, generator=torch.Generator().manual_seed(7))  # TP: same input
            check(kind, parallelize_module(a, mesh, plan), parallelize_module(b, mesh, plan), xs)
    from neuron_inductor import stats as ni_stats
    from neuron_inductor.cache import stats
    from neuron_inductor.runtime import host
    # one file per rank: two ranks printing to one pipe can interleave their lines
    with open(f"rank{rank}.json", "w") as f:
        json.dump({"rank": rank, "misses": stats()["misses"], "hits": stats()["hits"],
                   "collectives": host.collective_counts(), "fallbacks": dict(ni_stats.fallback_ops())}, f)
    dist.barrier()  # nobody tears gloo down while a peer still talks to it
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:] or ["ddp", "fsdp2", "tp"])
