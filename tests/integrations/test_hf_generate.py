"""Static-cache generate of sliding-window models through plain transformers: under
``backend="neuron"`` the decode step compiles once (no recompile per step, so no silent eager run
past Dynamo's recompile limit), with eager's tokens, also after the window is full."""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from neuron_inductor.integrations import hf  # noqa: E402

WINDOW, PROMPT, NEW = 4, 6, 12  # the cache holds 18 positions: well past the window


def _mistral():
    from transformers import MistralConfig, MistralForCausalLM
    torch.manual_seed(0)
    cfg = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                        max_position_embeddings=64, sliding_window=WINDOW, pad_token_id=0,
                        bos_token_id=1, eos_token_id=2)
    return MistralForCausalLM(cfg).eval()


def _generate(model, **kw):
    ids = torch.randint(3, 64, (2, PROMPT), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW,
                              min_new_tokens=NEW, do_sample=False, cache_implementation="static",
                              output_logits=True, return_dict_in_generate=True, **kw)


def test_registered_in_transformers():
    from transformers.cache_utils import STATIC_LAYER_TYPE_MAPPING, StaticCache
    assert hf.install()
    assert STATIC_LAYER_TYPE_MAPPING["sliding_attention"] is hf.sliding_layer_class()
    cache = StaticCache(config=_mistral().config, max_cache_len=PROMPT + NEW)
    assert all(type(layer) is hf.sliding_layer_class() for layer in cache.layers)


def test_hybrid_sliding_layers_keep_every_position(monkeypatch):
    """The hybrid linear-attention + sliding-window layer (inkling's, zaya's ``hybrid_sliding``) is
    built on the stock sliding layer and recompiled every decode step the same way: it is replaced
    too, and under our backend it stores the whole cache length, not the window."""
    from transformers.cache_utils import (STATIC_LAYER_TYPE_MAPPING,
                                          LinearAttentionAndStaticSlidingWindowAttentionLayer as Stock)
    assert hf.install()
    cls = STATIC_LAYER_TYPE_MAPPING["hybrid_sliding"]
    assert cls is hf.sliding_layer_class(Stock) and issubclass(cls, Stock)
    monkeypatch.setattr(hf, "neuron_active", lambda: True)
    layer = cls(max_cache_len=PROMPT + NEW, sliding_window=WINDOW)
    k = torch.randn(1, 1, PROMPT, 8)
    layer.update(k, k.clone())
    assert layer.keys.shape[-2] == PROMPT + NEW
    assert int(layer.get_seq_length()) == PROMPT


@pytest.mark.smoke
@pytest.mark.parametrize("active", [False, True])
def test_full_length_layer_matches_stock_eagerly(monkeypatch, active):
    """Storing every position and masking the window gives the stock rolling layer's results."""
    from transformers.cache_utils import STATIC_LAYER_TYPE_MAPPING, StaticSlidingWindowLayer
    model = _mistral()
    monkeypatch.setitem(STATIC_LAYER_TYPE_MAPPING, "sliding_attention", StaticSlidingWindowLayer)
    expected = _generate(model)
    monkeypatch.setitem(STATIC_LAYER_TYPE_MAPPING, "sliding_attention", hf.sliding_layer_class())
    monkeypatch.setattr(hf, "neuron_active", lambda: active)
    got = _generate(model)
    assert torch.equal(got.sequences, expected.sequences)
    for a, b in zip(got.logits, expected.logits):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.smoke
@pytest.mark.slow
def test_compiled_decode_is_one_graph_past_the_window():
    """What a user writes: compile the forward with our backend, generate with a static cache."""
    from neuron_inductor.integrations.hf import dynamo_graph_count, install
    # earlier tests in this process may have re-imported transformers' cache module; registration on
    # import (whatever the order) is checked in a fresh process by the test below
    install()
    model = _mistral()
    expected = _generate(model)
    torch._dynamo.reset()
    model.forward = torch.compile(model.forward, backend="neuron", dynamic=False)
    before = dynamo_graph_count()  # a process-wide total: reset() leaves Dynamo's counters alone
    got = _generate(model)
    assert dynamo_graph_count() - before <= 2, "prefill and decode, nothing per decode step"
    assert torch.equal(got.sequences, expected.sequences)


@pytest.mark.slow
def test_stock_layer_recompiles_are_named_once(monkeypatch, caplog):
    """Where our layer is not in use (registered too late, or replaced), the per-step recompiles are
    one warning naming the cause and the fix, not silence."""
    import neuron_inductor.backend  # noqa: F401 - imported first: its import registers our layer
    from transformers.cache_utils import STATIC_LAYER_TYPE_MAPPING, StaticSlidingWindowLayer
    monkeypatch.setitem(STATIC_LAYER_TYPE_MAPPING, "sliding_attention", StaticSlidingWindowLayer)
    monkeypatch.setattr(hf, "_warned_recompiles", [False])
    model = _mistral()
    torch._dynamo.reset()
    model.forward = torch.compile(model.forward, backend="neuron", dynamic=False)
    with caplog.at_level("WARNING", logger="neuron_inductor"):
        _generate(model)
    hits = [r for r in caplog.records if "StaticSlidingWindowLayer" in r.getMessage()]
    assert len(hits) == 1 and "install()" in hits[0].getMessage()


def test_layer_registered_when_transformers_loads_after_our_backend():
    """Importing our backend before transformers (any import order of user code) still registers
    the recompile-free sliding-window layer before a cache is built."""
    import subprocess
    import sys
    code = ("import neuron_inductor.backend\n"
            "import transformers.cache_utils as c\n"
            "from neuron_inductor.integrations import hf\n"
            "assert c.STATIC_LAYER_TYPE_MAPPING['sliding_attention'] is hf.sliding_layer_class()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
