"""Host program -> wrapper text -> loaded and run through the simulator, int64/bool views and
declared fallbacks included."""
from __future__ import annotations

import math

import pytest
import torch

import _ir_examples as E
from neuron_inductor.codegen.kernel import generate_kernels_module
from neuron_inductor.codegen.wrapper import generate_wrapper_module, render_const
from neuron_inductor.ir import Empty, Fallback, KernelCall, Program, Ref, TensorMeta, View
from neuron_inductor.ir.verify import verify_program
from neuron_inductor.runtime import host
from neuron_inductor.runtime.loader import load_sources
from neuron_inductor.target import TRN2


def build_program() -> Program:
    gather = E.gather_rows()
    copy64 = E.copy_kernel("k_copy64", 2 * 15, "int32")
    copyb = E.copy_kernel("k_copyb", 32, "uint8")
    return Program(
        name="roundtrip",
        inputs=["arg0", "arg1", "arg2", "arg3"],
        input_meta=[TensorMeta((50, 64), (64, 1), 0, "float32"), TensorMeta((200,), (1,), 0, "int64"),
                    TensorMeta((3, 5), (1, 3), 0, "int64"), TensorMeta((4, 8), (8, 1), 8, "bool")],
        steps=[
            KernelCall(gather, ["arg0", "arg1"], ["out0"], [TensorMeta((200, 64), (64, 1), 0, "float32")]),
            KernelCall(copy64, ["arg2"], ["i64"], [TensorMeta((3, 5), (1, 3), 0, "int64")]),
            KernelCall(copyb, ["arg3"], ["msk"], [TensorMeta((4, 8), (8, 1), 0, "bool")]),
            View("v1", "out0", TensorMeta((64, 200), (1, 64), 0, "float32")),
            Empty("e2", TensorMeta((0, 3), (3, 1), 0, "float32")),
            Fallback(["fb3"], "aten.clamp.default", (Ref("out0"), float("-inf"), 0.5), {},
                     reason="no lowering for clamp with -inf (test)", shapes="float32[200, 64]"),
            Fallback(["fb4", "fb5"], "aten.native_dropout.default", (Ref("v1"), 0.0, True), {},
                     reason="random ops run eagerly", unpack=True),
            Fallback(["fb6"], "aten.full.default", ([2, 3], float("nan")),
                     {"dtype": torch.float32, "layout": torch.strided, "device": torch.device("cpu"),
                      "pin_memory": False}, reason="constant"),
            Fallback(["fb7"], "aten.clone.default", (Ref("i64"),), {"memory_format": torch.contiguous_format},
                     reason="memory_format"),
        ],
        outputs=[Ref("out0"), Ref("v1"), Ref("e2"), Ref("i64"), Ref("msk"), Ref("fb3"), Ref("fb4"),
                 Ref("fb5"), Ref("fb6"), Ref("fb7"), None, 3],
    )


@pytest.fixture(scope="module")
def program_and_sources():
    p = build_program()
    return p, {"kernels.py": generate_kernels_module(p.kernels, graph_name=p.name),
               "wrapper.py": generate_wrapper_module(p)}


def test_program_verifies(program_and_sources):
    verify_program(program_and_sources[0], TRN2)


def test_wrapper_text(program_and_sources):
    _, src = program_and_sources
    w = src["wrapper.py"]
    compile(w, "wrapper.py", "exec")
    assert 'kernels = host.load_sibling(__file__, "kernels")' in w
    assert "arg0, arg1, arg2, arg3 = args\n    args.clear()" in w
    assert 'out0_flat = kernels.k_gather(host.hbm(arg0, \'float32\'), host.hbm(arg1, \'int32\'))' in w
    assert "out0 = host.view(out0_flat, (200, 64), (64, 1), 0, 'float32')" in w
    assert "i64 = host.view(i64_flat, (3, 5), (1, 3), 0, 'int64')" in w
    assert "v1 = torch.as_strided(out0, (64, 200), (1, 64), out0.storage_offset())" in w
    assert "e2 = host.empty((0, 3), (3, 1), 'float32')" in w
    assert "fb3 = torch.ops.aten.clamp.default(out0, float('-inf'), 0.5)" in w
    assert "# declared fallback: no lowering for clamp with -inf (test) [float32[200, 64]]" in w
    assert "host.count_fallback('aten.native_dropout.default')" in w
    assert "fb4, fb5 = torch.ops.aten.native_dropout.default(v1, 0.0, True)" in w
    assert ("torch.ops.aten.full.default([2, 3], float('nan'), dtype=torch.float32, layout=torch.strided, "
            "device=torch.device('cpu'), pin_memory=False)") in w
    assert "memory_format=torch.contiguous_format" in w
    assert w.rstrip().endswith("return (out0, v1, e2, i64, msk, fb3, fb4, fb5, fb6, fb7, None, 3)")
    assert "Conventions:" in w  # documented in the module docstring


def test_round_trip(program_and_sources):
    _, src = program_and_sources
    mod = load_sources(src)
    g = torch.Generator().manual_seed(0)
    table = torch.randn(50, 64, generator=g)
    idx = torch.randint(0, 50, (200,), generator=g)
    i64 = torch.tensor([[2**40 + 3, -7, 2**31], [-(2**33), 5, 0], [1, -1, 2**62], [9, 8, 7], [-5, 4, 3]],
                       dtype=torch.int64).t()  # (3, 5), stride (1, 3)
    base = torch.rand(5, 8, generator=g) > 0.5
    msk = base[1:]  # storage offset 8
    host.reset_fallback_counts()
    args = [table, idx, i64, msk]
    out = mod(args)
    assert args == []  # the wrapper frees its inputs
    emb = table[idx]
    torch.testing.assert_close(out[0], emb, rtol=0, atol=0)
    assert out[1].shape == (64, 200) and out[1].data_ptr() == out[0].data_ptr()  # a view, not a copy
    torch.testing.assert_close(out[1], emb.t(), rtol=0, atol=0)
    assert out[2].shape == (0, 3)
    assert out[3].dtype == torch.int64 and torch.equal(out[3], i64)
    assert out[4].dtype == torch.bool and torch.equal(out[4], msk)
    torch.testing.assert_close(out[5], emb.clamp(max=0.5))
    torch.testing.assert_close(out[6], emb.t()) and bool(out[7].all())
    assert out[8].shape == (2, 3) and math.isnan(out[8][0, 0].item())
    assert torch.equal(out[9], i64) and out[9].is_contiguous()
    assert out[10:] == (None, 3)
    assert host.fallback_counts() == {"aten.clamp.default": 1, "aten.native_dropout.default": 1,
                                      "aten.full.default": 1, "aten.clone.default": 1}


@pytest.mark.parametrize("value, text", [
    (float("inf"), "float('inf')"), (float("-inf"), "float('-inf')"), (1e-5, "1e-05"), (True, "True"),
    (torch.bfloat16, "torch.bfloat16"), (torch.channels_last, "torch.channels_last"),
    ((1,), "(1,)"), ([Ref("a"), (None, "s")], "[a, (None, 's')]"), (torch.Size([2, 3]), "torch.Size((2, 3))"),
])
def test_render_const(value, text):
    assert render_const(value) == text


def test_render_const_refuses_unknown():
    with pytest.raises(TypeError, match="cannot render"):
        render_const(object())


def test_flat_buffer_names_never_shadow_host_values():
    k = E.copy_kernel("k", 4, "float32")
    meta = TensorMeta((4,), (1,), 0, "float32")
    p = Program("g", ["a_flat"], [meta], steps=[KernelCall(k, ["a_flat"], ["a"], [meta])],
                outputs=[Ref("a"), Ref("a_flat")])
    w = generate_wrapper_module(p)
    assert "a_flat1 = kernels.k(host.hbm(a_flat, 'float32'))" in w
    assert "a = host.view(a_flat1, (4,), (1,), 0, 'float32')" in w


def test_bad_fallback_target_and_arity():
    p = Program("g", ["a"], [None], steps=[Fallback(["r"], "aten.x; import os", (), {}, reason="")],
                outputs=[Ref("r")])
    with pytest.raises(ValueError, match="dotted op name"):
        generate_wrapper_module(p)
    k = E.copy_kernel("k", 4, "float32")
    p = Program("g", ["a"], [None], steps=[KernelCall(k, [], ["r"], [None])], outputs=[Ref("r")])
    with pytest.raises(ValueError, match="0 args for 1 params"):
        generate_wrapper_module(p)
