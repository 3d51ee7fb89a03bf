"""Fine-tune a causal LM with the Hugging Face Trainer on the neuron backend.

    python examples/finetune_trainer.py            # 20 steps
    python examples/finetune_trainer.py --smoke    # 3 steps (also: NEURON_INDUCTOR_SMOKE=1)

The only change from an ordinary Trainer script is ``torch_compile=True,
torch_compile_backend="neuron"`` (on a Trainium host, ``torch_compile=True`` alone picks it).
Sequences are padded to 128-token buckets so the run compiles one shape. Offline: a tiny random Llama
and synthetic data stand in for a real checkpoint and corpus.
"""
import os
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from neuron_inductor.bucketing import BucketingCollator

SMOKE = "--smoke" in sys.argv or os.environ.get("NEURON_INDUCTOR_SMOKE") == "1"


def synthetic_rows(n: int, vocab: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(n):
        ids = torch.randint(3, vocab, (8 + (5 * i) % 40,), generator=g)
        rows.append({"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)})
    return rows


def main() -> None:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)
    args = TrainingArguments(output_dir="/tmp/neuron_finetune", max_steps=3 if SMOKE else 20,
                             per_device_train_batch_size=2, learning_rate=1e-3, logging_steps=1,
                             report_to="none", save_strategy="no", use_cpu=True,
                             torch_compile=True, torch_compile_backend="neuron")
    trainer = Trainer(model=LlamaForCausalLM(cfg), args=args, train_dataset=synthetic_rows(64, 256),
                      data_collator=BucketingCollator(pad_token_id=0))
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    print(f"losses: {[round(x, 4) for x in losses]}")
    assert all(x == x for x in losses), "NaN loss"


if __name__ == "__main__":
    main()
