"""Supervised fine-tuning with TRL's SFTTrainer on the neuron backend, padded to 128-token buckets.

    python examples/sft_trl.py            # 10 steps
    python examples/sft_trl.py --smoke    # 2 steps (also: NEURON_INDUCTOR_SMOKE=1)

``pad_to_multiple_of=128`` is TRL's Neuron setting: every batch is one of a few shapes, each
compiled once. Offline: a word-level tokenizer built in memory, a tiny random Llama, synthetic text.
"""
import os
import sys

import datasets
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import SFTConfig, SFTTrainer

SMOKE = "--smoke" in sys.argv or os.environ.get("NEURON_INDUCTOR_SMOKE") == "1"
VOCAB = 128


def tokenizer() -> PreTrainedTokenizerFast:
    words = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="</s>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="</s>")


def texts(n: int) -> list[str]:
    g = torch.Generator().manual_seed(0)
    return [" ".join(f"w{t}" for t in torch.randint(3, VOCAB, (5 + (7 * i) % 30,), generator=g).tolist())
            for i in range(n)]


def main() -> None:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, bos_token_id=1,
                      eos_token_id=2)
    args = SFTConfig(output_dir="/tmp/neuron_sft", max_steps=2 if SMOKE else 10,
                     per_device_train_batch_size=2, learning_rate=1e-3, logging_steps=1,
                     report_to="none", save_strategy="no", use_cpu=True, max_length=128,
                     pad_to_multiple_of=128, torch_compile=True, torch_compile_backend="neuron")
    trainer = SFTTrainer(model=LlamaForCausalLM(cfg), args=args, processing_class=tokenizer(),
                         train_dataset=datasets.Dataset.from_dict({"text": texts(32)}))
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    print(f"losses: {[round(x, 4) for x in losses]}")
    assert all(x == x and abs(x) != float("inf") for x in losses), "non-finite loss"


if __name__ == "__main__":
    main()
