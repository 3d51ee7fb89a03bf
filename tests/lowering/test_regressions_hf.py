"""Compiler bugs found by the Hugging Face architecture matrix (benchmarks/architectures.py), one test each."""
from __future__ import annotations

import torch

from neuron_inductor import stats


def _compile(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend="neuron")


def test_input_mutation_alone_in_its_group_is_written_back():
    """A static KV cache's counter (``len.add_(1)``) and cache write (``index_put`` + ``copy_``) land in
    groups whose only effect is the ``copy_``; the group had no escaping output and its kernel was
    dropped, so the second decode step read a stale cache (gpt2/llama generate diverged at token 3)."""
    def step(x, counter, cache):
        pos = counter + torch.arange(1)
        cache.index_put_((torch.tensor([0, 1]).unsqueeze(1), pos), x)
        counter.add_(1)
        return x * 2

    def run(fn):
        counter = torch.zeros((), dtype=torch.int64)
        cache = torch.zeros(2, 5)
        outs = [fn(torch.full((2, 1), float(i + 1)), counter, cache) for i in range(3)]
        return outs, counter, cache

    eo, ec, ek = run(step)
    co, cc, ck = run(_compile(step))
    assert int(cc) == 3 == int(ec)
    torch.testing.assert_close(ck, ek)
    torch.testing.assert_close(co, eo)


def test_inference_layer_norm_has_no_fallback():
    """Under no_grad torch's LayerNorm ref computes var_mean with prims (prims.var, broadcast_in_dim),
    which had no lowering: every LayerNorm model's inference graph ran them on the host."""
    ln = torch.nn.LayerNorm(24)
    torch.nn.init.normal_(ln.weight)
    torch.nn.init.normal_(ln.bias)
    x = torch.randn(3, 5, 24)
    stats.reset("compile", "fallback_ops")
    with torch.no_grad():
        got = _compile(ln)(x)
        expected = ln(x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert not stats.fallback_ops(), dict(stats.fallback_ops())


def test_var_mean_matches_with_correction():
    """Our var/var_mean decompositions (Bessel correction, keepdim, several dims)."""
    def f(x):
        v, m = torch.var_mean(x, dim=(1, 2), correction=1, keepdim=False)
        return v + m + torch.var(x, dim=-1, unbiased=False)[:, :1].sum()
    x = torch.randn(4, 6, 10)
    stats.reset("compile", "fallback_ops")
    with torch.no_grad():
        torch.testing.assert_close(_compile(f)(x), f(x), rtol=1e-5, atol=1e-5)
    assert not stats.fallback_ops(), dict(stats.fallback_ops())


def test_copy_into_slice_of_new_empty_is_dense():
    """DeepSeek-V3's rope split fills a ``new_empty`` tensor slice by slice: functionalized, that is
    ``aten.copy(slice(empty), src)`` whose value keeps the slice's strides (8 of every 16 elements);
    its kernel left the gaps unwritten (simulator: output-not-written)."""
    def f(x):
        out = x.new_empty(2, 4, 16, 16)
        out[..., :8] = x.transpose(1, 2)[..., :8] * 2
        out[..., 8:] = x.transpose(1, 2)[..., 8:] + 1
        return out * 3
    x = torch.randn(2, 16, 4, 16)
    stats.reset("compile", "fallback_ops")
    torch.testing.assert_close(_compile(f)(x), f(x), rtol=1e-5, atol=1e-5)
    assert set(stats.fallback_ops()) <= {"aten.empty.memory_format"}, dict(stats.fallback_ops())


def test_moe_expert_weight_gather_and_topk_scatter_lower():
    """MoE (transformers' batched_mm experts): ``weights[expert_ids]`` (aten.index.Tensor) and the
    router's top-k and its scatter (aten.topk, aten.scatter.src, k > 1) ran on the host; now a row
    gather, k rounds of max-and-mark and k compare-and-selects."""
    w = torch.randn(4, 8, 6)

    def f(logits, ids):
        v, i = torch.topk(logits, 2, dim=-1)
        return torch.zeros_like(logits).scatter(-1, i, v), w[ids].sum(1)
    args = (torch.randn(5, 4), torch.tensor([[0, 2], [2, 3]]))
    stats.reset("compile", "fallback_ops")
    with torch.no_grad():
        torch.testing.assert_close(_compile(f)(*args), f(*args))
    assert not stats.fallback_ops(), dict(stats.fallback_ops())


def test_views_of_a_copy_whose_gapped_layout_was_made_dense():
    """qwen3_5_text training ran both graphs eagerly (``expand_19: view of copy_5, whose layout with
    gaps was made dense``): ``aten.copy`` into a slice keeps the slice's strides, the kernel writes it
    densely, and views of it (expand, transpose) must be replayed on the dense layout."""
    def f(x, w):
        c = torch.ops.aten.copy(x[:, :8], w.exp())
        return c.unsqueeze(0).expand(3, 5, 8) + 1, c.t() * 2, c[1:, ::2].sum(-1)

    x, w = torch.randn(5, 16), torch.randn(5, 8)
    stats.reset("compile", "fallback_ops")
    torch._dynamo.reset()
    out = torch.compile(f, backend="neuron", options={"cache": False, "fallback": "error"})(x, w)
    for o, r in zip(out, f(x, w)):
        torch.testing.assert_close(o, r)
    assert not stats.fallback_ops(), dict(stats.fallback_ops())


def test_views_of_a_kernel_result_whose_traced_value_starts_inside_its_storage():
    """gemma3n_text's ``corrected_predictions[1:] += first_prediction``: in the backward graph,
    ``aten.copy(slice, x)`` keeps the slice's storage offset (130 x 64 x 2 elements in). The kernel
    result is a buffer of its own starting at the value, but its consumers were placed at the traced
    offset: the IR verifier refused a read past the end of the buffer and the graph fell back."""
    def f(x, y):
        z = x * 2
        z[1:] += y
        return (z * z).sum()

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 2, 130, 64, generator=g, requires_grad=True)
    y = torch.randn(2, 130, 64, generator=g, requires_grad=True)
    ref = torch.autograd.grad(f(x, y), (x, y))
    torch._dynamo.reset()
    stats.reset("compile")
    got = torch.autograd.grad(torch.compile(f, backend="neuron", options={"fallback": "error"})(x, y), (x, y))
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)
    assert stats.compiled()["graph_fallbacks"] == 0

    def view_of_copy(x, y):  # the forward form: a slice of such a result, read by the next kernel
        c = torch.ops.aten.copy.default(x[1:], y)
        return c[:, 1:] * 3 + 1

    x2, y2 = torch.randn(3, 4, 5, generator=g), torch.randn(2, 4, 5, generator=g)
    torch._dynamo.reset()
    out = torch.compile(view_of_copy, backend="neuron", options={"fallback": "error"})(x2, y2)
    torch.testing.assert_close(out, view_of_copy(x2, y2))
