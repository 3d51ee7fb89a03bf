"""torchrun worker: ``Trainer(torch_compile=True)`` on a model loaded through ``DistributedConfig``.

argv: KIND (fsdp | tp | single) CHECKPOINT OUT_DIR. ``fsdp``/``tp``: two ranks, the checkpoint loaded
with ``from_pretrained(..., distributed_config=DistributedConfig(fsdp_size=2 | tp_size=2))``, trained
3 steps by an unmodified ``Trainer`` with ``torch_compile=True, torch_compile_backend="neuron"`` (no
``--fsdp`` flags, no Accelerate config), 2 rows per rank in dataset order. ``single``: one process,
no config, eager, 4 rows per step (the two ranks' rows together: FSDP averages their gradients).
Writes rank<N>.json: the logged per-step losses, cache misses/hits, graphs built, fallbacks.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _hf import TokenDataset, load_distributed_llama, write_rank_result  # noqa: E402


def main() -> None:
    kind, ckpt, out = sys.argv[1], sys.argv[2], sys.argv[3]
    from transformers import Trainer, TrainingArguments

    model = load_distributed_llama(kind, ckpt)
    compiled = kind != "single"
    args = TrainingArguments(
        output_dir=os.path.join(out, "trainer"), max_steps=3, learning_rate=1e-3, logging_steps=1,
        per_device_train_batch_size=2 if compiled else 4, train_sampling_strategy="sequential",
        report_to="none", save_strategy="no", seed=0, use_cpu=True, dataloader_num_workers=0,
        torch_compile=compiled, torch_compile_backend="neuron" if compiled else None)
    trainer = Trainer(model=model, args=args, train_dataset=TokenDataset())
    trainer.train()
    write_rank_result(out, [h["loss"] for h in trainer.state.log_history if "loss" in h])


if __name__ == "__main__":
    main()
