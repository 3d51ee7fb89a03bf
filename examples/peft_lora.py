"""LoRA (or DoRA) fine-tuning with PEFT and the Hugging Face Trainer on the neuron backend.

    python examples/peft_lora.py            # LoRA, 20 steps
    python examples/peft_lora.py --dora     # DoRA
    python examples/peft_lora.py --smoke    # 2 steps (also: NEURON_INDUCTOR_SMOKE=1)

The change from an ordinary PEFT + Trainer script is ``torch_compile=True,
torch_compile_backend="neuron"`` (for DoRA also ``enable_dora_compile()``, which keeps each DoRA layer
from splitting the graph). Only the adapters train: the backward graph computes their gradients and
nothing for the frozen base weights. After training the adapters are merged into the base weights and
the merged model's compiled inference is checked against the adapter model run eagerly. Offline: a
tiny random Llama and synthetic tokens stand in for a checkpoint and a corpus.
"""
import sys

import torch
from _proof import check_close, eager_twice, report, scratch_dir, smoke
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from neuron_inductor.bucketing import BucketingCollator

SMOKE = smoke()
DORA = "--dora" in sys.argv


def synthetic_rows(n: int, vocab: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(n):
        ids = torch.randint(3, vocab, (8 + (5 * i) % 40,), generator=g)
        rows.append({"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)})
    return rows


def main() -> None:
    from neuron_inductor import stats

    if DORA:
        from neuron_inductor.integrations.peft import enable_dora_compile
        enable_dora_compile()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)
    model = get_peft_model(LlamaForCausalLM(cfg), LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, use_dora=DORA))
    model.print_trainable_parameters()
    with scratch_dir("neuron_peft_") as out:
        args = TrainingArguments(output_dir=out, max_steps=2 if SMOKE else 20,
                                 per_device_train_batch_size=2, learning_rate=1e-2, logging_steps=1,
                                 report_to="none", save_strategy="no", use_cpu=True,
                                 torch_compile=True, torch_compile_backend="neuron")
        trainer = Trainer(model=model, args=args, train_dataset=synthetic_rows(64, 256),
                          data_collator=BucketingCollator(pad_token_id=0))
        trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    print(f"losses: {[round(x, 4) for x in losses]}")
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert all(p.grad is None for n, p in model.named_parameters() if n in frozen)

    ids = torch.randint(3, 256, (1, 128), generator=torch.Generator().manual_seed(1))
    batch = dict(input_ids=ids, attention_mask=torch.ones_like(ids))
    with torch.no_grad():
        want, spread = eager_twice(lambda: model(**batch).logits)  # adapters applied on the fly, eager
        merged = model.merge_and_unload().eval()
        got = torch.compile(merged, backend="neuron")(**batch).logits
    # merging folds B @ A into W, so even eager's merged logits differ from the adapter model's by
    # rounding: the floor is that of fp32 logits of order 1 after two layers
    check_close("merged model (compiled) vs adapter model (eager) logits", got, want, spread, floor=1e-4)
    report()
    assert not stats.fallback_ops()
    print("merged-adapter inference matches eager")


if __name__ == "__main__":
    main()
