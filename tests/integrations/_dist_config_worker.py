"""torchrun worker: a model loaded through transformers' ``DistributedConfig``, trained compiled.

argv: KIND (tp | fsdp | single) CHECKPOINT OUT_DIR. Loads the checkpoint with
``from_pretrained(..., distributed_config=DistributedConfig(tp_size=2 | fsdp_size=2))`` (``single``:
no config, no process group: the reference), compiles it with ``backend="neuron"`` (``single``:
eager), runs 3 AdamW steps on the same batches on every rank (so FSDP's averaged gradient is the
single-process one) and writes rank<N>.json: per-step losses, cache misses/hits, fallbacks.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _hf import TokenDataset, load_distributed_llama, write_rank_result  # noqa: E402


def main() -> None:
    kind, ckpt, out = sys.argv[1], sys.argv[2], sys.argv[3]
    model = load_distributed_llama(kind, ckpt)
    model.train()
    step_fn = model if kind == "single" else torch.compile(model, backend="neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TokenDataset()
    losses = []
    for step in range(3):
        rows = [data[2 * step], data[2 * step + 1]]
        batch = {k: torch.stack([r[k] for r in rows]) for k in rows[0]}
        loss = step_fn(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach().full_tensor() if hasattr(loss, "full_tensor") else loss.detach()))
    write_rank_result(out, losses)


if __name__ == "__main__":
    main()
