"""Activation checkpointing wraps recomputed ops in RNG save/replay higher-order ops (TRL's default)."""
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from neuron_inductor import stats


def _attn(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).sin()


def test_checkpointed_attention_compiles_without_fallback():
    stats.reset("compile", "fallback_ops")

    def f(q, k, v):
        return checkpoint(_attn, q, k, v, use_reentrant=False).sum()

    torch.manual_seed(0)
    ins = [torch.randn(2, 2, 16, 8, requires_grad=True) for _ in range(3)]
    ref = [t.detach().clone().requires_grad_(True) for t in ins]
    out = torch.compile(f, backend="neuron", options={"fallback": "error"})(*ins)
    out.backward()
    expected = f(*ref)
    expected.backward()
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    for a, b in zip(ins, ref):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)
    assert stats.compiled()["graph_fallbacks"] == 0 and not stats.fallback_ops()


def test_checkpointed_dropout_still_replays_its_random_numbers():
    """A random op keeps its RNG wrappers (whole-graph fallback), so the replay matches the forward."""
    def f(x):
        return checkpoint(lambda t: F.dropout(t, 0.5, training=True) * 3, x, use_reentrant=False).sum()

    x = torch.ones(256, requires_grad=True)
    torch.manual_seed(0)
    out = torch.compile(f, backend="neuron")(x)
    out.backward()
    # forward and replayed backward used the same mask: 6 per kept element in both
    assert 0 < out.item() < 6 * 256
    torch.testing.assert_close(out, x.grad.sum())
    assert set(x.grad.unique().tolist()) <= {0.0, 6.0}
