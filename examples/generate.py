"""Text generation with a static KV cache on the neuron backend.

    python examples/generate.py            # 24 new tokens
    python examples/generate.py --smoke    # 4 new tokens (also: NEURON_INDUCTOR_SMOKE=1)

``cache_implementation="static"`` keeps every decode step the same shape, so the decode graph is
compiled once and reused for every token. Offline: a tiny random Llama; the tokens are checked
against eager greedy decoding.
"""
import torch
from _proof import check_close, eager_twice, report, smoke
from transformers import LlamaConfig, LlamaForCausalLM

SMOKE = smoke()


def main() -> None:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)
    model = LlamaForCausalLM(cfg).eval()
    prompt = torch.randint(3, 256, (1, 8), generator=torch.Generator().manual_seed(1))
    kw = dict(max_new_tokens=4 if SMOKE else 24, do_sample=False, cache_implementation="static",
              output_logits=True, return_dict_in_generate=True)
    expected, spread = eager_twice(lambda: model.generate(prompt, **kw).logits)
    want = model.generate(prompt, **kw)
    model.forward = torch.compile(model.forward, backend="neuron")
    got = model.generate(prompt, **kw)
    print("eager:   ", want.sequences[0].tolist())
    print("compiled:", got.sequences[0].tolist())
    assert torch.equal(got.sequences, want.sequences), "compiled generation differs from eager"
    check_close("logits of every generated token", got.logits, expected, spread, floor=1e-5)
    report()


if __name__ == "__main__":
    main()
