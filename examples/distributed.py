"""Tensor-parallel (DTensor) and DDP training steps compiled with the neuron backend under torchrun.

    torchrun --standalone --nproc_per_node 2 examples/distributed.py            # 10 steps
    torchrun --standalone --nproc_per_node 2 examples/distributed.py --smoke    # 2 steps

gloo on CPU stands in for the Neuron collectives. Functional collectives in the compiled graph (TP's
all-reduce) run as *declared collectives* in the generated wrapper; all ranks share one compile
cache, and each graph is compiled by one rank only (the others wait on its file lock and load it).
Each compiled run is checked against the same run eagerly (final loss and trained weights; eager on
one thread and on several gives its own spread).
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.nn.parallel import DistributedDataParallel as DDP
from _proof import check_close, eager_twice, report, smoke

SMOKE = smoke()


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(64, 256)
        self.down = nn.Linear(256, 64)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def train(model: nn.Module, x: torch.Tensor, steps: int, compiled: bool = True) -> tuple[float, list]:
    """``steps`` SGD steps; the last loss and the trained weights (sharded ones gathered)."""
    run = torch.compile(model, backend="neuron") if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        loss = (run(x) ** 2).mean()
        loss.backward()
        opt.step()
    weights = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in model.parameters()]
    return loss.item(), [w.detach().clone() for w in weights]


def tp_model(mesh) -> nn.Module:
    torch.manual_seed(0)
    return parallelize_module(MLP(), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})


def ddp_model() -> nn.Module:
    torch.manual_seed(0)
    return DDP(MLP())


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    steps = 2 if SMOKE else 10
    mesh = init_device_mesh("cpu", (world,))
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(0))  # TP: every rank, same batch
    x_ddp = torch.randn(8, 64, generator=torch.Generator().manual_seed(rank))  # DDP: a batch per rank
    tp_eager, tp_spread = eager_twice(lambda: train(tp_model(mesh), x, steps, compiled=False))
    ddp_eager, ddp_spread = eager_twice(lambda: train(ddp_model(), x_ddp, steps, compiled=False))
    tp_loss, tp_weights = train(tp_model(mesh), x, steps)
    ddp_loss, ddp_weights = train(ddp_model(), x_ddp, steps)
    # SGD on fp32: only the order of the sums differs from eager
    check_close(f"rank {rank}: TP loss and weights", (tp_loss, tp_weights), tp_eager, tp_spread, floor=1e-5)
    check_close(f"rank {rank}: DDP loss and weights", (ddp_loss, ddp_weights), ddp_eager, ddp_spread,
                floor=1e-5)
    from neuron_inductor.cache import stats
    from neuron_inductor.runtime import host
    s = stats()
    print(f"rank {rank}: tp loss {tp_loss:.5f}, ddp loss {ddp_loss:.5f}, cache misses {s['misses']} "
          f"hits {s['hits']}, collectives {host.collective_counts()}", flush=True)
    report(f"rank {rank}: ")
    dist.barrier()  # nobody tears gloo down while a peer still talks to it
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
