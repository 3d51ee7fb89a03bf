"""Text generation with a static KV cache on the neuron backend.

    python examples/generate.py            # 24 new tokens
    python examples/generate.py --smoke    # 4 new tokens (also: NEURON_INDUCTOR_SMOKE=1)

``cache_implementation="static"`` keeps every decode step the same shape, so the decode graph is
compiled once and reused for every token. Offline: a tiny random Llama; the tokens are checked
against eager greedy decoding.
"""
import os
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SMOKE = "--smoke" in sys.argv or os.environ.get("NEURON_INDUCTOR_SMOKE") == "1"


def main() -> None:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)
    model = LlamaForCausalLM(cfg).eval()
    prompt = torch.randint(3, 256, (1, 8), generator=torch.Generator().manual_seed(1))
    kw = dict(max_new_tokens=4 if SMOKE else 24, do_sample=False, cache_implementation="static")
    expected = model.generate(prompt, **kw)
    model.forward = torch.compile(model.forward, backend="neuron")
    got = model.generate(prompt, **kw)
    print("eager:   ", expected[0].tolist())
    print("compiled:", got[0].tolist())
    assert torch.equal(got, expected), "compiled generation differs from eager"
    from neuron_inductor import stats
    print(f"graphs compiled: {stats.compiled()['graphs_compiled']}, fallbacks: {dict(stats.fallback_ops())}")


if __name__ == "__main__":
    main()
