"""Tensor-parallel (DTensor) and DDP training steps compiled with the neuron backend under torchrun.

    torchrun --standalone --nproc_per_node 2 examples/distributed.py            # 10 steps
    torchrun --standalone --nproc_per_node 2 examples/distributed.py --smoke    # 2 steps

gloo on CPU stands in for the Neuron collectives. Functional collectives in the compiled graph (TP's
all-reduce) run as *declared collectives* in the generated wrapper; all ranks share one compile
cache, and each graph is compiled by one rank only (the others wait on its file lock and load it).
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.nn.parallel import DistributedDataParallel as DDP

SMOKE = "--smoke" in sys.argv or os.environ.get("NEURON_INDUCTOR_SMOKE") == "1"


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(64, 256)
        self.down = nn.Linear(256, 64)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def train(model: nn.Module, x: torch.Tensor, steps: int) -> float:
    compiled = torch.compile(model, backend="neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        loss = (compiled(x) ** 2).mean()
        loss.backward()
        opt.step()
    return loss.item()


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    steps = 2 if SMOKE else 10
    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", (world,))
    tp = parallelize_module(MLP(), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(0))  # TP: every rank, same batch
    tp_loss = train(tp, x, steps)
    torch.manual_seed(0)
    ddp = DDP(MLP())
    ddp_loss = train(ddp, torch.randn(8, 64, generator=torch.Generator().manual_seed(rank)), steps)
    from neuron_inductor.cache import stats
    from neuron_inductor.runtime import host
    s = stats()
    print(f"rank {rank}: tp loss {tp_loss:.5f}, ddp loss {ddp_loss:.5f}, cache misses {s['misses']} "
          f"hits {s['hits']}, collectives {host.collective_counts()}", flush=True)
    dist.barrier()  # nobody tears gloo down while a peer still talks to it
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
