"""Hand-built IR kernels -> NKI source -> allowlist check -> simulator -> compare with numpy."""
from __future__ import annotations

import ast

import numpy as np
import pytest
import sympy

import _ir_examples as E
from neuron_inductor.codegen.check import check_kernel_source
from neuron_inductor.codegen.kernel import HEADER, generate_kernels_module, kernel_source
from neuron_inductor.ir import Alloc, Instr, Kernel, Loop, Tile, loop_var
from neuron_inductor.ir.verify import verify_kernel
from neuron_inductor.runtime import host
from neuron_inductor.target import TRN2


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    kernels = [f() for f in E.ALL.values()]
    for k in kernels:
        if k.name != "k_gather":  # verified (and run) by test_indirect_gather_runs
            verify_kernel(k, TRN2)
    src = generate_kernels_module(kernels, graph_name="examples")
    check_kernel_source(src)
    path = tmp_path_factory.mktemp("kernels") / "kernels.py"
    path.write_text(src)
    return src, host.load_file(str(path))


def test_module_header_and_docstrings(compiled):
    src, _ = compiled
    assert HEADER in src.splitlines()
    assert src.count("@nki.jit") == 4
    # provenance, plan and parameter list land in the kernel docstring
    assert "aten.mm.default(a, b)" in src and "Tile plan:" in src and "a: float32[60000] (input)" in src
    # every nisa call uses keywords only
    assert "nisa.nc_matmul(dst=" in src and "accumulate=i1 > 0" in src


def test_readable_index_arithmetic(compiled):
    src, _ = compiled
    assert "size_i0 = min(128, 300 - 128 * i0)" in src  # ragged size hoisted and named
    assert "x_t[0:size_i0, 0:size_i1]" in src
    assert "0:0 + " not in src and "Min(" not in src and "floor" not in src
    assert "out0 = nl.ndarray((210000,), dtype=nl.float32, buffer=nl.shared_hbm)" in src
    assert "offset=89600 * i0 + 512 * i1" in src
    assert "vector_offset=idx_t[0:size_i0, 0:1], indirect_dim=0" in src
    assert "value=-float('inf'), engine=nisa.gpsimd_engine" in src
    assert "return out0, out1" in src


def test_pointwise_ragged_runs(compiled):
    _, mod = compiled
    x = np.random.default_rng(0).standard_normal((300, 700)).astype(np.float32)
    y = np.asarray(mod.k_pointwise(x.reshape(-1))).reshape(300, 700)
    np.testing.assert_allclose(y, E.pointwise_ref(x), rtol=1e-6, atol=1e-6)


def test_matmul_k_accumulation_runs(compiled):
    _, mod = compiled
    rng = np.random.default_rng(1)
    a = rng.standard_normal((200, 300)).astype(np.float32)
    b = rng.standard_normal((300, 96)).astype(np.float32)
    y = np.asarray(mod.k_matmul(a.reshape(-1), b.reshape(-1))).reshape(200, 96)
    np.testing.assert_allclose(y, a @ b, rtol=1e-4, atol=1e-4)


def test_indirect_gather_runs(compiled):
    verify_kernel(E.gather_rows(), TRN2)  # indirect DMA takes its row stride from the base's shape
    _, mod = compiled
    rng = np.random.default_rng(2)
    table = rng.standard_normal((50, 64)).astype(np.float32)
    idx = rng.integers(0, 50, 200).astype(np.int64)
    y = np.asarray(mod.k_gather(table.reshape(-1), idx.view(np.int32))).reshape(200, 64)
    np.testing.assert_array_equal(y, table[idx])


def test_reduction_runs(compiled):
    _, mod = compiled
    x = np.random.default_rng(3).standard_normal((300, 700)).astype(np.float32)
    s, m = mod.k_reduce(x.reshape(-1))
    np.testing.assert_allclose(np.asarray(s), x.sum(1), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(np.asarray(m), x.max(1))


def test_engine_keyword_only_when_not_default():
    t = Tile("t", (128, 4), "float32")
    body = [Alloc(t), Instr("vector", "memset", t.full(), {}, {"value": 1.0}),
            Instr("gpsimd", "tensor_scalar", t.full(), {"data": t.full()}, {"op0": "add", "operand0": 1})]
    src = kernel_source(Kernel("k", [], [], body))
    assert "nisa.memset(dst=t[0:128, 0:4], value=1.0)" in src
    assert "engine=nisa.gpsimd_engine)" in src and src.count("engine=") == 1
    assert src.rstrip().endswith("return None")


def test_sequential_loop_and_one_trip_simplification():
    i = loop_var("i0")
    t = Tile("t", (128, 512), "float32")
    body = [Loop(i, 1, "sequential", [Alloc(t), Instr("vector", "memset", t.region(128, sympy.Min(512, 700 - 512 * i)),
                                                      {}, {"value": 0.0})])]
    src = kernel_source(Kernel("k", [], [], body))
    assert "for i0 in nl.sequential_range(1):" in src
    assert "t[0:128, 0:512]" in src  # min(512, 700 - 512 * i0) with i0 == 0 is just 512
    check_kernel_source(f"{HEADER}\n{src}\n")


def test_docstring_is_escaped():
    k = Kernel("k", [], [], [], provenance=['weird """ quote \\ backslash'], plan="p")
    src = f"{HEADER}\n{kernel_source(k)}\n"
    check_kernel_source(src)
    fn = ast.parse(src).body[1]
    assert 'weird """ quote \\ backslash' in ast.get_docstring(fn)
