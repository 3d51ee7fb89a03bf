"""Gather/scatter/assembly lowerings (lowering/indexing.py) against eager PyTorch, in the simulator.

Each test traces a tiny function to an ATen graph (make_fx), lowers it with fallbacks turned into
errors (so a silent eager fallback cannot pass a test), generates the NKI kernels and the wrapper,
runs them in the simulator and compares with eager.
"""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import neuron_inductor.lowering.indexing  # noqa: F401  (registers the lowerings)
import neuron_inductor.lowering.pointwise  # noqa: F401
from neuron_inductor.codegen.check import check_kernel_source
from neuron_inductor.codegen.kernel import generate_kernels_module
from neuron_inductor.codegen.wrapper import generate_wrapper_module
from neuron_inductor.config import Config
from neuron_inductor.graph.passes import run_passes
from neuron_inductor.ir import Dma, walk
from neuron_inductor.pipeline import partition_and_lower as lower_graph
from neuron_inductor.lowering.loops import merge
from neuron_inductor.runtime.loader import load_sources

aten = torch.ops.aten


def compile_fn(fn, *args, free_chunk: int = 2048):
    """(compiled module, lowered program) of ``fn`` traced at ``args``; fallbacks are errors."""
    gm = run_passes(make_fx(fn)(*args))  # as the pipeline does (empty cat pieces are dropped there)
    lg = lower_graph(gm, Config(fallback="error", free_chunk=free_chunk))
    ks = generate_kernels_module(lg.program.kernels, graph_name="test")
    check_kernel_source(ks)
    return load_sources({"kernels": ks, "wrapper": generate_wrapper_module(lg.program)}), lg.program


def run(fn, *args, free_chunk: int = 2048):
    """(compiled outputs, eager outputs, lowered program) of ``fn(*args)``."""
    mod, prog = compile_fn(fn, *args, free_chunk=free_chunk)
    got = mod(list(args))
    want = fn(*args)
    return got, want, prog


def check(fn, *args, exact: bool = True, **kw):
    got, want, prog = run(fn, *args, **kw)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if exact:
            assert torch.equal(g, w), (g, w)
        else:
            torch.testing.assert_close(g, w)
    return prog


def dmas(prog) -> list[Dma]:
    return [s for k in prog.kernels for s, _ in walk(k.body) if isinstance(s, Dma)]


# ------------------------------------------------------------------------------------ planning

def test_merge_drops_unit_dims_and_merges_contiguous_runs():
    dims, st = merge([4, 1, 3, 5], [[15, 15, 5, 1], [15, 99, 5, 1]])
    assert dims == [60] and st == [[1], [1]]
    # a column slice of a wider tensor breaks the run between dims 0 and 1
    dims, st = merge([4, 3, 5], [[15, 5, 1], [40, 5, 1]])
    assert dims == [4, 15] and st == [[15, 1], [40, 1]]
    assert merge([1, 1], [[1, 1]]) == ([], [[]])


# ------------------------------------------------------------------------------------ embedding

@pytest.mark.parametrize("idx_dtype", [torch.int64, torch.int32])
def test_embedding_ragged_rows_wide_free(idx_dtype):
    w = torch.randn(50, 600)
    idx = torch.randint(0, 50, (2, 150), dtype=idx_dtype)  # 300 positions: 3 tiles, last ragged
    prog = check(lambda w, i: (aten.embedding.default(w, i),), w, idx)
    gathers = [d for d in dmas(prog) if getattr(d.src, "indirect", None) is not None]
    assert gathers, "embedding must gather rows with an indirect DMA"



def test_indirect_dma_row_stride_comes_from_a_reshaped_base():
    """Hardware multiplies each vector offset by the elements right of dim 0 of the tensor ``.ap`` is
    called on, ignoring the pattern: the gather must read a ``[rows, F]`` view, not the flat span
    (on a 1-D base every index would pick element ``idx`` instead of row ``idx``)."""
    w = torch.randn(50, 24)
    idx = torch.randint(0, 50, (7,))
    mod, prog = compile_fn(lambda w, i: (aten.embedding.default(w, i),), w, idx)
    [g] = [d for d in dmas(prog) if getattr(d.src, "indirect", None) is not None]
    assert g.src.view == (50, 24) and g.src.pattern[0][0] == 24
    assert g.src.indirect.dtype == "uint32"
    ks = generate_kernels_module(prog.kernels, graph_name="test")
    assert ".reshape((50, 24)).ap(pattern=[[24, " in ks and "vector_offset=" in ks
    torch.testing.assert_close(mod([w, idx])[0], w[idx], rtol=0, atol=0)
    # a strided index_select along dim 1: rows of one element, the table viewed as [N, 1]
    x = torch.randn(13, 5)
    j = torch.tensor([4, 0, 4])
    _, prog = compile_fn(lambda x, i: (aten.index_select.default(x, 1, i),), x, j)
    [g] = [d for d in dmas(prog) if getattr(d.src, "indirect", None) is not None]
    assert g.src.view == (65, 1)
    check(lambda x, i: (aten.index_select.default(x, 1, i),), x, j)


def test_simulated_indirect_dma_takes_its_row_stride_from_the_base_shape():
    """On hardware a vector offset moves by the base tensor's row, whatever the pattern says: the
    simulator refuses a pattern that disagrees with a flat base and reads whole rows of a reshape."""
    import numpy as np
    from neuron_inductor.runtime.sim.errors import SimulatorError
    from neuron_inductor.runtime.sim.tensor import Allocation
    flat = Allocation("in0", "hbm", np.arange(12, dtype=np.float32))
    idx = Allocation("idx", "sbuf", np.array([[2], [0]], dtype=np.uint32)).whole()
    pat = [[4, 2], [1, 4]]
    with pytest.raises(SimulatorError, match="indirect-dma-row-stride"):
        flat.whole().ap(pat, 0, vector_offset=idx)
    rows = flat.whole().reshape((3, 4)).ap(pat, 0, vector_offset=idx).read()
    assert rows.tolist() == [[8, 9, 10, 11], [0, 1, 2, 3]]


def test_embedding_bf16_scalar_index_and_free_chunking():
    w = torch.randn(10, 3000).to(torch.bfloat16)
    check(lambda w, i: (aten.embedding.default(w, i),), w, torch.tensor(7))
    check(lambda w, i: (aten.embedding.default(w, i),), w, torch.tensor([[3], [9]]))


def test_embedding_noncontiguous_weight_and_indices():
    w = torch.randn(40, 20).t()  # [20, 40], stride (1, 20)
    idx = torch.randint(0, 20, (6, 5)).t()  # non-contiguous indices
    check(lambda w, i: (aten.embedding.default(w, i),), w, idx)


def test_embedding_out_of_range_index_is_refused_by_the_simulator():
    w = torch.randn(8, 4)
    mod, _ = compile_fn(lambda w, i: (aten.embedding.default(w, i),), w, torch.tensor([1, 2]))
    with pytest.raises(Exception, match="out-of-bounds"):
        mod([w, torch.tensor([1, 8000])])


# ------------------------------------------------------------------------------------ index_select

def test_index_select_dims():
    x = torch.randn(300, 7, 9)
    i = torch.randint(0, 300, (200,))
    check(lambda x, i: (aten.index_select.default(x, 0, i),), x, i)
    j = torch.randint(0, 7, (5,))
    check(lambda x, i: (aten.index_select.default(x, 1, i),), x, j)
    k = torch.randint(0, 9, (130,))
    check(lambda x, i: (aten.index_select.default(x, -1, i),), x, k)


def test_index_select_int64_data():
    x = torch.randint(-2**40, 2**40, (20, 3))
    check(lambda x, i: (aten.index_select.default(x, 0, i),), x, torch.tensor([3, 0, 19, 3]))


def test_gathers_of_int64_tables_and_scalar_indices():
    w = torch.randint(-2**40, 2**40, (9, 3))  # int64 rows: word pairs, high words included
    check(lambda w, i: (aten.embedding.default(w, i),), w, torch.tensor([[1, 8], [0, 0]]))
    check(lambda x, i: (aten.index_select.default(x, 1, i),), torch.randn(3, 4), torch.tensor(2))
    check(lambda x, i: (aten.index_select.default(x, 0, i),), torch.tensor(5.0), torch.tensor([0]))


# ------------------------------------------------------------------------------------ cat

def test_cat_three_on_dim0_ragged():
    a, b, c = torch.randn(100, 600), torch.randn(130, 600), torch.randn(70, 600)
    check(lambda a, b, c: (aten.cat.default([a, b, c], 0),), a, b, c)


def test_cat_three_on_last_dim_noncontiguous_and_empty():
    a = torch.randn(33, 300)
    b = torch.randn(5, 300).t()  # [300, 5] transposed view
    c = torch.randn(300, 2, 7)[:, 1, :]  # strided slice
    e = torch.empty(300, 0)
    check(lambda a, b, c, e: (aten.cat.default([a.t(), b, e, c], -1),), a, b, c, e)


def test_cat_int64_bool_and_dtype_promotion():
    a, b = torch.randint(-2**40, 2**40, (3, 4)), torch.randint(-5, 5, (2, 4))
    check(lambda a, b: (aten.cat.default([a, b]),), a, b)
    m = torch.rand(4, 3) > 0.5
    check(lambda a, b: (aten.cat.default([a, b], 1),), m, ~m)
    i32 = torch.randint(-100, 100, (2, 4), dtype=torch.int32)
    check(lambda a, b: (aten.cat.default([a, b]),), a, i32)  # int32 widened: high words are the sign
    f = torch.randn(3, 4, dtype=torch.bfloat16)
    check(lambda a, b: (aten.cat.default([a, b]),), f, torch.randn(1, 4))


def test_cat_large_flat_uses_many_partitions():
    a, b = torch.randn(6000), torch.randn(4096)
    prog = check(lambda a, b: (aten.cat.default([a, b]),), a, b)
    assert max(int(d.dst.sizes[0]) for d in dmas(prog) if d.is_load) == 128


# ------------------------------------------------------------------------------------ scatters

def test_slice_scatter_steps_and_negative_bounds():
    base, src = torch.randn(300, 40), torch.randn(300, 13)
    check(lambda b, s: (aten.slice_scatter.default(b, s, 1, 1, -1, 3),), base, src)
    src0 = torch.randn(150, 40)
    check(lambda b, s: (aten.slice_scatter.default(b, s, 0, None, None, 2),), base, src0)


def test_select_scatter_middle_dim_and_negative_index():
    base, src = torch.randn(4, 5, 600), torch.randn(4, 600)
    check(lambda b, s: (aten.select_scatter.default(b, s, 1, -2),), base, src)
    check(lambda b, s: (aten.select_scatter.default(b, s, 0, 0),), torch.randn(3), torch.tensor(2.0))


def test_index_put_kv_cache_update():
    cache = torch.randn(2, 3, 300, 16)
    new = torch.randn(2, 3, 4, 16)
    pos = torch.tensor([5, 299, 128, -1])  # -1 wraps to the last row, as in torch
    check(lambda c, v, p: (aten.index_put.default(c, [None, None, p], v),), cache, new, pos)
    pos32 = torch.arange(100, 230, dtype=torch.int32)  # 130 rows: two index tiles
    new2 = torch.randn(130, 16)  # broadcast over batch and heads
    check(lambda c, v, p: (aten.index_put.default(c, [None, None, p], v),), cache, new2, pos32)


def test_index_put_2d_index_and_int64_scatters():
    x, v = torch.randn(4, 50, 3), torch.randn(4, 2, 3, 3)
    idx = torch.tensor([[1, 2, 3], [40, 41, 49]])
    check(lambda x, v, i: (aten.index_put.default(x, [None, i], v),), x, v, idx)
    b, s = torch.randint(-2**40, 2**40, (300, 3)), torch.randint(-2**40, 2**40, (300,))
    check(lambda b, s: (aten.select_scatter.default(b, s, 1, 0),), b, s)
    check(lambda b, s: (aten.slice_scatter.default(b, s, 0, 2, 5),), b, b[:3].clone())


def test_index_put_dim0_bf16():
    x, v = torch.randn(10, 8).to(torch.bfloat16), torch.randn(3, 8).to(torch.bfloat16)
    check(lambda x, v, i: (aten.index_put.default(x, [i], v),), x, v, torch.tensor([9, 0, 4]))


def test_index_put_accumulate_is_a_declared_fallback():
    x, v, i = torch.randn(10, 8), torch.randn(3, 8), torch.tensor([1, 1, 4])
    fn = lambda x, v, i: (aten.index_put.default(x, [i], v, True),)  # noqa: E731
    gm = make_fx(fn)(x, v, i)
    lg = lower_graph(gm, Config(fallback="warn"))
    assert [f[0] for f in lg.fallbacks] == ["aten.index_put.default"]
    assert "accumulate" in lg.fallbacks[0][2]
    m = torch.tensor([True, False] * 5)
    gm = make_fx(lambda x, v, m: (aten.index_put.default(x, [m], v),))(x, torch.randn(5, 8), m)
    lg = lower_graph(gm, Config(fallback="warn"))
    assert [f[0] for f in lg.fallbacks] == ["aten.index_put.default"]


# ------------------------------------------------------------------------------------ pad and copy

def test_constant_pad_positive_negative_and_int64():
    x = torch.randn(300, 600)
    check(lambda x: (aten.constant_pad_nd.default(x, [3, -2, -5, 7], 1.5),), x)
    check(lambda x: (aten.constant_pad_nd.default(x, [-1, -1]),), x)  # pure crop: no fill
    xi = torch.randint(-9, 9, (2, 3, 4))
    check(lambda x: (aten.constant_pad_nd.default(x, [1, 1, 0, 0, 2, 0], -7),), xi)
    check(lambda x: (aten.constant_pad_nd.default(x, [0, 2], 2**33 + 5),), xi)  # high word != sign
    check(lambda x: (aten.constant_pad_nd.default(x, [0, 2], 0),), xi)
    xb = torch.randn(4, 5, dtype=torch.bfloat16)
    check(lambda x: (aten.constant_pad_nd.default(x, [0, 3], 0.0),), xb)
    check(lambda x: (aten.constant_pad_nd.default(x, [-5, 2], 0.0),), torch.randn(2, 5))  # all cropped


def test_copy_broadcast_and_casts():
    dst = torch.empty(300, 5, 130)
    check(lambda d, s: (aten.copy.default(d, s),), dst, torch.randn(5, 1))
    check(lambda d, s: (aten.copy.default(d, s),), torch.empty(4, 3, dtype=torch.int64),
          torch.randint(-100, 100, (4, 3), dtype=torch.int32))
    check(lambda d, s: (aten.copy.default(d, s),), torch.empty(4, 3, dtype=torch.bool),
          torch.tensor([0.0, 2.0, -1.0]))
    check(lambda d, s: (aten.copy.default(d, s),), torch.empty(()), torch.tensor(3.0))
    check(lambda d, s: (aten.copy.default(d, s),), torch.empty(3, dtype=torch.int64),
          torch.tensor([1.5, -2.7, 3.0]))  # float -> int64 truncates; high word is the sign
    check(lambda x: (aten.constant_pad_nd.default(x, [1, 2], True),), torch.rand(3, 4) > 0.5)
    check(lambda d, s: (aten.copy.default(d, s),), torch.empty(2, 3, dtype=torch.bfloat16),
          torch.randn(3, 2).t(), exact=False)


# ------------------------------------------------------------------------------------ end to end

OPTS = {"fallback": "error", "cache": False}


def test_torch_compile_embedding_cat_pad_forward_and_backward():
    def f(w, i, a, b):
        e = torch.nn.functional.embedding(i, w)
        p = torch.nn.functional.pad(torch.cat([a, b], dim=-1), (2, 3))
        return e * 2, p * 3

    w = torch.randn(50, 32, requires_grad=True)
    i = torch.randint(0, 50, (3, 7))
    a, b = torch.randn(300, 5, requires_grad=True), torch.randn(300, 9, requires_grad=True)
    outs = torch.compile(f, backend="neuron", options=OPTS)(w, i, a, b)
    ref = f(w, i, a, b)
    gos = [torch.randn_like(o) for o in ref]
    for x, y in zip(outs, ref):
        torch.testing.assert_close(x, y)
    for x, y in zip(torch.autograd.grad(outs, (w, a, b), gos), torch.autograd.grad(ref, (w, a, b), gos)):
        torch.testing.assert_close(x, y)


def test_torch_compile_static_kv_cache_update():
    def step(cache, new, pos):
        cache = cache.clone()
        cache[:, :, pos] = new
        return cache

    c, n = torch.randn(2, 3, 200, 8), torch.randn(2, 3, 2, 8)
    pos = torch.tensor([3, 199])
    got = torch.compile(step, backend="neuron", options=OPTS)(c, n, pos)
    assert torch.equal(got, step(c, n, pos))
