"""Fine-tune a causal LM with the Hugging Face Trainer on the neuron backend, and check it against the
same training run eagerly.

    python examples/finetune_trainer.py            # 20 steps
    python examples/finetune_trainer.py --smoke    # 3 steps (also: NEURON_INDUCTOR_SMOKE=1)

The only change from an ordinary Trainer script is ``torch_compile=True,
torch_compile_backend="neuron"`` (on a Trainium host, ``torch_compile=True`` alone picks it).
Sequences are padded to 128-token buckets so the run compiles one shape. The same training runs
eagerly (twice: from the same weights and from weights one ulp apart, for eager's own spread); the
compiled run's logged losses and trained weights must match it. Offline: a tiny random Llama and
synthetic data stand in for a real checkpoint and corpus.
"""
import torch
from _proof import compare_training, nudge_, scratch_dir, smoke
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from neuron_inductor.bucketing import BucketingCollator

STEPS = 3 if smoke() else 20
LR = 1e-3


def synthetic_rows(n: int, vocab: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(n):
        ids = torch.randint(3, vocab, (8 + (5 * i) % 40,), generator=g)
        rows.append({"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)})
    return rows


def train(compiled: bool, nudge: bool = False) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Train a fresh model (same seed every time); return the logged losses and the trained weights."""
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)
    model = LlamaForCausalLM(cfg)
    if nudge:
        nudge_(model)
    with scratch_dir("neuron_finetune_") as out:
        args = TrainingArguments(output_dir=out, max_steps=STEPS, per_device_train_batch_size=2,
                                 learning_rate=LR, logging_steps=1, report_to="none", save_strategy="no",
                                 use_cpu=True, torch_compile=compiled,
                                 torch_compile_backend="neuron" if compiled else None)
        trainer = Trainer(model=model, args=args, train_dataset=synthetic_rows(64, 256),
                          data_collator=BucketingCollator(pad_token_id=0))
        trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}


def main() -> None:
    compare_training(train, STEPS)


if __name__ == "__main__":
    main()
