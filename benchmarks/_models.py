"""Models the benchmarks share with the tests (tests/models/blocks.py), importable from benchmarks/."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from models.blocks import TransformerBlock, mlp  # noqa: E402,F401


def tiny_llama():
    import torch
    import transformers
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                   max_position_embeddings=128)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg)
