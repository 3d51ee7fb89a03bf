"""Tiny Hugging Face pieces built offline (random weights, in-memory tokenizer, synthetic data)."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

VOCAB = 128


def tiny_llama(seed: int = 0, vocab: int = VOCAB):
    """A 2-layer Llama with hidden size 64 (GQA: 4 heads, 2 KV heads), same weights for a given seed."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(cfg)


class TokenDataset(torch.utils.data.Dataset):
    """Fixed random token rows; labels = input_ids (the model shifts them)."""

    def __init__(self, n: int = 12, seq: int = 16, vocab: int = VOCAB, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(3, vocab, (n, seq), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        ids = self.ids[i]
        return {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)}


def tiny_tokenizer(vocab: int = VOCAB):
    """A word-level fast tokenizer over words ``w3..w{vocab-1}`` with pad/bos/eos ids 0/1/2."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "<s>": 1, "</s>": 2}
    words.update({f"w{i}": i for i in range(3, vocab)})
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="</s>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="</s>")


def text_rows(n: int = 8, vocab: int = VOCAB, seed: int = 0) -> list[str]:
    """Sentences of random words with varied lengths (so batches need padding)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        length = 5 + (7 * i) % 11
        ids = torch.randint(3, vocab, (length,), generator=g).tolist()
        rows.append(" ".join(f"w{t}" for t in ids))
    return rows


def load_distributed_llama(kind: str, ckpt: str):
    """``from_pretrained`` through transformers' ``DistributedConfig``: ``tp``/``fsdp`` on 2 ranks,
    anything else (``single``) without one -- the torchrun workers' shared way to load."""
    from transformers import LlamaForCausalLM
    from transformers.distributed import DistributedConfig

    sizes = {"tp": dict(tp_size=2), "fsdp": dict(fsdp_size=2)}
    kw = {"distributed_config": DistributedConfig(**sizes[kind])} if kind in sizes else {}
    return LlamaForCausalLM.from_pretrained(ckpt, **kw)


def write_rank_result(out: str, losses: list[float]) -> None:
    """rank<N>.json: the losses and the compiler's counters, which the launching test reads."""
    import json

    from neuron_inductor import stats
    rank = int(os.environ.get("RANK", 0))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "losses": losses, "graphs_compiled": stats.compiled()["graphs_compiled"],
                   "fallbacks": dict(stats.fallback_ops()), "misses": stats.cache()["misses"],
                   "hits": stats.cache()["hits"]}, f)
