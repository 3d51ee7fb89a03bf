"""TRL SFTTrainer with packing on the neuron backend: static packed shapes, documents kept apart.

    python examples/sft_packing.py                   # bfd packing, max_length 2048, 6 steps
    python examples/sft_packing.py --wrapped         # wrapped packing (cuts documents mid-sequence)
    python examples/sft_packing.py --smoke           # max_length 128, 2 steps

TRL packs documents into sequences of up to ``max_length`` tokens; with padding-free ``bfd`` a
batch of 2 such sequences arrives as one row of up to 2 x ``max_length`` tokens (4096 in the full
run, 256 in ``--smoke``), padded to a multiple of 128.

Beyond an ordinary packing script: ``pad_to_multiple_of=128`` (TRL's Neuron setting), Dynamo's
automatic dynamic shapes off (each packed shape is its own static graph, compiled once), and
``static_shape_packing(trainer)``, which drops FlashAttention's varlen metadata from the batches
(``cu_seq_lens``, ``max_length``: a new shape or Python int every batch, read only by FlashAttention).
Best-fit-decreasing packing is padding-free: one row per batch whose position ids restart at every
document, from which transformers builds a block-diagonal causal mask, so no token attends across a
document boundary. Offline: in-memory word-level tokenizer, tiny random Llama, synthetic text.
"""
import sys

import datasets
import torch
from _proof import compare_training, nudge_, scratch_dir, smoke
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import SFTConfig, SFTTrainer

from neuron_inductor.integrations.trl import static_shape_packing

SMOKE = smoke()
STRATEGY = "wrapped" if "--wrapped" in sys.argv else "bfd"
MAX_LEN = 128 if SMOKE else 2048
STEPS = 2 if SMOKE else 6
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
    return [" ".join(f"w{t}" for t in torch.randint(3, VOCAB, ((10 + (37 * i) % 90) * MAX_LEN // 256,),
                                                     generator=g).tolist()) for i in range(n)]


def train(compiled: bool, nudge: bool = False
          ) -> tuple[list[float], dict[str, torch.Tensor], list[tuple[int, ...]]]:
    """Fine-tune a fresh model (same seed every time): logged losses, trained weights, batch shapes."""
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, bos_token_id=1,
                      eos_token_id=2, max_position_embeddings=MAX_LEN)
    model = LlamaForCausalLM(cfg)
    if nudge:
        nudge_(model)
    with scratch_dir("neuron_sft_packing_") as out:
        args = SFTConfig(output_dir=out, max_steps=STEPS, per_device_train_batch_size=2, learning_rate=LR,
                         logging_steps=1, report_to="none", save_strategy="no", use_cpu=True,
                         max_length=MAX_LEN, packing=True, packing_strategy=STRATEGY, pad_to_multiple_of=128,
                         torch_compile=compiled, torch_compile_backend="neuron" if compiled else None)
        trainer = SFTTrainer(model=model, args=args, processing_class=tokenizer(),
                             train_dataset=datasets.Dataset.from_dict({"text": texts(48)}))
        static_shape_packing(trainer)
        shapes = []
        inner = trainer.data_collator

        def collator(features):
            batch = inner(features)
            shapes.append(tuple(batch["input_ids"].shape))
            return batch
        trainer.data_collator = collator
        trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    return losses, weights, shapes[:len(losses)]  # the dataloader may collate one batch ahead


def main() -> None:
    from neuron_inductor import stats
    from neuron_inductor.bucketing import recommended_recompile_limit

    torch._dynamo.config.automatic_dynamic_shapes = False
    # batch of 2 rows flattened into one: up to 2 * MAX_LEN tokens, 128-token buckets
    torch._dynamo.config.recompile_limit = 2 * recommended_recompile_limit(2 * MAX_LEN)
    _, _, shapes = compare_training(train, STEPS)
    print(f"packed shapes per step: {shapes}")
    print(f"{len(set(shapes))} distinct packed shape(s)")
    assert all(s[-1] % 128 == 0 for s in shapes) and not stats.fallback_ops()
    print("packed training ran with static shapes")


if __name__ == "__main__":
    main()
