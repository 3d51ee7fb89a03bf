"""Supervised fine-tuning with TRL's SFTTrainer on the neuron backend, padded to 128-token buckets,
checked against the same run eagerly.

    python examples/sft_trl.py            # 10 steps
    python examples/sft_trl.py --smoke    # 2 steps (also: NEURON_INDUCTOR_SMOKE=1)

``pad_to_multiple_of=128`` is TRL's Neuron setting: every batch is one of a few shapes, each
compiled once. The same fine-tuning runs eagerly (from the same weights and from weights one ulp
apart, for eager's own spread); the compiled run's logged losses and trained weights must match it.
Offline: a word-level tokenizer built in memory, a tiny random Llama, synthetic text.
"""
import datasets
import torch
from _proof import compare_training, nudge_, scratch_dir, smoke
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import SFTConfig, SFTTrainer

STEPS = 2 if smoke() else 10
LR = 1e-3
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


def train(compiled: bool, nudge: bool = False) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Fine-tune a fresh model (same seed every time); return the logged losses and the weights."""
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, bos_token_id=1,
                      eos_token_id=2)
    model = LlamaForCausalLM(cfg)
    if nudge:
        nudge_(model)
    with scratch_dir("neuron_sft_") as out:
        args = SFTConfig(output_dir=out, max_steps=STEPS, per_device_train_batch_size=2, learning_rate=LR,
                         logging_steps=1, report_to="none", save_strategy="no", use_cpu=True,
                         max_length=128, pad_to_multiple_of=128, torch_compile=compiled,
                         torch_compile_backend="neuron" if compiled else None)
        trainer = SFTTrainer(model=model, args=args, processing_class=tokenizer(),
                             train_dataset=datasets.Dataset.from_dict({"text": texts(32)}))
        trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}


def main() -> None:
    compare_training(train, STEPS)


if __name__ == "__main__":
    main()
