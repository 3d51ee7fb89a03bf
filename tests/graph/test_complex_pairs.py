"""Complex intermediates (Llama 4's rotary embedding) become pairs of real tensors before AOTAutograd:
forward and backward match eager with no fallback; graphs with complex inputs or outputs, or ops the
pass does not know, are left alone (their complex ops stay declared fallbacks)."""
from __future__ import annotations

import pytest
import torch

from neuron_inductor import stats
from neuron_inductor.graph.complex_pairs import rewrite_complex
from tests._compare import check


def llama4_rotary(x, position_ids, inv_freq):
    """transformers' Llama4TextRotaryEmbedding.forward + apply_rotary_emb, as written there."""
    freqs = position_ids[..., None].float() * inv_freq.to(device=x.device, dtype=torch.float)
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs) * 1.0
    xq_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    out = torch.view_as_real(xq_ * freqs_cis.to(x.device)[:, :, None, :]).flatten(3)
    return out.type_as(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_llama4_rotary_runs_on_real_pairs_forward_and_backward(dtype):
    x = torch.randn(2, 130, 4, 16).to(dtype)
    pos = torch.arange(130)[None].expand(2, 130)
    inv = 1.0 / (500000 ** (torch.arange(0, 16, 2).float() / 16))
    stats.reset()
    check(llama4_rotary, x, pos, inv, grad=True)
    assert not stats.fallback_ops(), dict(stats.fallback_ops())


def test_complex_add_sub_conj_and_real_scaling():
    def fn(a, b):
        ca = torch.view_as_complex(a)
        cb = torch.view_as_complex(b)
        return torch.view_as_real((ca + cb) * 2.0 - ca * cb.conj())
    stats.reset()
    check(fn, torch.randn(5, 300, 2), torch.randn(5, 300, 2), grad=True)
    assert not stats.fallback_ops(), dict(stats.fallback_ops())


def _dynamo_graph(fn, *args) -> torch.fx.GraphModule:
    graphs = []

    def grab(gm, ex):
        graphs.append(gm)
        return gm
    torch._dynamo.reset()
    torch.compile(fn, backend=grab)(*args)
    return graphs[0]


def test_a_complex_output_or_an_unknown_op_leaves_the_graph_alone():
    x = torch.randn(4, 8, 2)
    gm = _dynamo_graph(lambda t: torch.view_as_complex(t) * 2, x)
    assert not rewrite_complex(gm)
    gm = _dynamo_graph(lambda t: torch.view_as_complex(t).abs(), x)
    assert not rewrite_complex(gm)
    gm = _dynamo_graph(lambda t: torch.view_as_real(torch.view_as_complex(t) * (1 + 2j)), x)
    assert not rewrite_complex(gm)
    gm = _dynamo_graph(lambda t: torch.view_as_real(torch.view_as_complex(t) * 3), x)
    assert rewrite_complex(gm)
    assert not any(n.meta.get("example_value") is not None and n.meta["example_value"].is_complex()
                   for n in gm.graph.nodes)
    torch.testing.assert_close(gm(x)[0], x * 3)
