"""Our own decompositions turn index-heavy ATen ops into lowered ones (no eager fallback)."""
import torch

from _compare import check


def test_broadcast_advanced_indexing_is_a_row_gather():
    """Hugging Face's padding-mask construction: mask[batch_idx, kv_idx] with broadcast indices."""
    torch.manual_seed(0)
    mask = torch.rand(2, 16) > 0.3
    b = torch.arange(2).view(2, 1, 1, 1)
    kv = torch.arange(16).view(1, 1, 1, 16)
    check(lambda m, b, kv: m[b, kv], mask, b, kv, fallback="error")


def test_leading_index_with_negative_entries():
    x = torch.randn(5, 7, 3)
    check(lambda x, i: x[i], x, torch.tensor([[4, -1], [0, 2]]), grad=True, fallback="error")
    check(lambda x, i, j: x[i, j] * 2, x, torch.tensor([4, -1, 0]), torch.tensor([[1], [6]]),
          fallback="error")


def test_single_index_on_a_later_dim_is_an_index_select():
    """``qkv[:, :, :, [-2]]`` (Falcon's fused QKV split): one index tensor after slices gathers
    along that dim, forward and backward, with negative and repeated entries and a 2-D index."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, 6, 3)
    check(lambda x: x[:, :, :, [-2]] * 2, x, grad=True, fallback="error")
    check(lambda x, i: x[:, i], x, torch.tensor([[4, -1], [0, 4]]), grad=True, fallback="error")


def test_embedding_backward_takes_a_permuted_gradient():
    """CPM-Ant's relative-position bias, ``embedding(buckets, bias).permute(0, 3, 1, 2).contiguous()``, hands
    the embedding backward a gradient whose strides are permuted: it is reshaped to rows, not
    viewed (a view of it does not exist)."""
    torch.manual_seed(0)
    w = torch.randn(10, 4)
    idx = torch.randint(0, 10, (2, 5, 5))
    check(lambda w, i: torch.nn.functional.embedding(i, w).permute(0, 3, 1, 2).contiguous() * 2,
          w, idx, grad=True, fallback="error")


def test_decomposition_table_is_built_once():
    from neuron_inductor.graph.decompositions import decomposition_table
    assert decomposition_table() is decomposition_table()


def test_accumulating_index_put_with_duplicates():
    """Duplicate rows must add (the backward of a row gather)."""
    x = torch.randn(6, 4)
    idx = torch.tensor([1, 3, 1, -1, 1])
    v = torch.randn(5, 4)
    check(lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True), x, idx, v, fallback="error")


def test_bool_mask_fill_index_put_is_a_where():
    """``x[mask] = 0`` (tensor-parallel embeddings zero out-of-shard rows this way) lowers as a
    ``where``: no fallback, same values, int64 ids included."""
    from neuron_inductor import stats
    from _compare import run_compiled
    g = torch.Generator().manual_seed(0)
    for (shape, mask_dims), dtype in [(((2, 16), 2), torch.int64), (((2, 16, 8), 2), torch.float32),
                                      (((5, 3), 1), torch.float32)]:
        x = (torch.randn(*shape, generator=g) * 100).to(dtype)
        mask = torch.rand(*shape[:mask_dims], generator=g) < 0.5

        def fill(x, mask):
            y = x.clone()
            y[mask] = 0
            return y
        stats.reset("compile", "fallback_ops")
        got = run_compiled(fill, x, mask, fallback="error")
        torch.testing.assert_close(got, fill(x, mask), rtol=0, atol=0)


def test_new_empty_strided_dense_is_an_empty_and_other_strides_are_left():
    """Autograd buffers (gpt-oss's and deepseek-v3's MoE backward) ask for ``new_empty_strided`` with
    contiguous strides, a functionalized copy into a transposed view (qwen3_5's gated-delta rule)
    with permuted ones: an ``empty`` (permuted back) with exactly those strides, no fallback; strides
    with gaps stay as they are."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from neuron_inductor.graph.decompositions import decomposition_table
    aten = torch.ops.aten
    x = torch.randn(3, 4)
    for size, stride in (([5, 130], [130, 1]), ([5, 130], [1, 5]), ([2, 3, 64, 128], [24576, 8192, 1, 64])):
        gm = make_fx(lambda x: aten.new_empty_strided.default(x, size, stride).fill_(2.0) + x.sum(),
                     decomposition_table=decomposition_table())(x)
        targets = [n.target for n in gm.graph.nodes]
        assert aten.new_empty_strided.default not in targets and aten.empty.memory_format in targets
        buf = make_fx(lambda x: aten.new_empty_strided.default(x, size, stride),
                      decomposition_table=decomposition_table())(x)(x)
        assert buf.shape == tuple(size) and buf.stride() == tuple(stride)
    gm = make_fx(lambda x: aten.new_empty_strided.default(x, [5, 130], [1, 10]),
                 decomposition_table=decomposition_table())(x)
    assert aten.new_empty_strided.default in [n.target for n in gm.graph.nodes]


def test_copy_into_a_transposed_buffer_compiles_with_no_fallback():
    """``new_empty_strided`` with a transposed view's strides, then ``copy_`` into it (what
    functionalization leaves for an in-place update of a transposed view)."""
    def f(x):
        y = x.transpose(-1, -2)
        buf = y.new_empty_strided(y.shape, y.stride())
        buf.copy_(y * 2)
        return buf.sum(-1) + buf[..., 0]
    x = torch.randn(2, 3, 130, 7)
    check(f, x, fallback="error")


def test_embedding_backward_keeps_non_finite_gradients_in_their_tokens_rows():
    """gemma3n_text's eager gradients are NaN at padded positions (``mean(h**2) ** 0.5`` of a zero
    row); eager's embedding backward adds them into those tokens' rows only (not the padding_idx
    row). The one-hot matmul spread ``0 * NaN`` into every row of the weight gradient."""
    import math

    def f(w, idx):
        return torch.nn.functional.embedding(idx, w, padding_idx=0)

    idx = torch.tensor([[0, 3, 5, 3, 7], [9, 0, 5, 11, 2]])
    for dt in (torch.float32, torch.bfloat16):
        g = torch.Generator().manual_seed(0)
        w = torch.randn(40, 24, generator=g).to(dt).requires_grad_()
        up = torch.randn(2, 5, 24, generator=g).to(dt)
        up[0, 1, 2] = up[0, 0, 1] = math.nan  # token 3 (twice), and the padding_idx row (dropped)
        up[0, 2, 4], up[1, 2, 4] = math.inf, -math.inf  # token 5 twice: +inf and -inf -> NaN
        up[0, 4, 6], up[1, 0, 7] = math.inf, -math.inf
        ref, = torch.autograd.grad(f(w, idx), w, up)
        torch._dynamo.reset()
        out = torch.compile(f, backend="neuron", options={"fallback": "error", "cache": False})(w, idx)
        got, = torch.autograd.grad(out, w, up)
        assert ref.isnan().any() and ref.isinf().any() and ref.isfinite().any()
        torch.testing.assert_close(got, ref, equal_nan=True)
