"""The IR dump: one line per statement, loops indented, tiles/accesses/engines visible."""
from __future__ import annotations

import sympy

from neuron_inductor.ir import (Alloc, Dma, Empty, Fallback, HBMAccess, HBMTensor, Instr, Kernel, KernelCall,
                                Loop, Program, Ref, TensorMeta, Tile, View, loop_var)
from neuron_inductor.ir.printer import format_kernel, format_program, format_stmt


def kernel() -> Kernel:
    x = HBMTensor("x", 300 * 64, "float32")
    out = HBMTensor("out0", 300 * 64, "float32", "output")
    i = loop_var("i0")
    pr = sympy.Min(128, 300 - 128 * i)
    t, acc = Tile("t", (128, 64), "bfloat16"), Tile("acc", (128, 64), "float32", "psum")
    body = [Alloc(acc), Loop(i, 3, "sequential", [
        Alloc(t),
        Dma(t.region(pr, 64), HBMAccess(x, 8192 * i, ((64, pr), (1, 64)))),
        Instr("scalar", "activation", t.region(pr, 64), {"data": t.region(pr, 64)}, {"op": "exp", "scale": 0.5}),
        Dma(HBMAccess(out, 8192 * i, ((64, pr), (1, 64))), t.region(pr, 64)),
    ])]
    return Kernel("k0", [x], [out], body, provenance=["exp = aten.exp.default(x)"], plan="rows on partitions")


def test_format_kernel():
    text = format_kernel(kernel())
    assert text.splitlines() == [
        "kernel k0",
        "  param x: float32[19200] input",
        "  output out0: float32[19200] output",
        "  # from exp = aten.exp.default(x)",
        "  # plan: rows on partitions",
        "  alloc acc: psum float32[128, 64]",
        "  for i0 in sequential_range(3):",
        "    alloc t: sbuf bfloat16[128, 64]",
        "    dma.load t[0:min(128, 300 - 128 * i0), 0:64] <- x.ap(pattern=[[64, min(128, 300 - 128 * i0)], "
        "[1, 64]], offset=8192 * i0)",
        "    scalar.activation t[0:min(128, 300 - 128 * i0), 0:64] <- data=t[0:min(128, 300 - 128 * i0), 0:64], "
        "op=exp, scale=0.5",
        "    dma.store out0.ap(pattern=[[64, min(128, 300 - 128 * i0)], [1, 64]], offset=8192 * i0) <- "
        "t[0:min(128, 300 - 128 * i0), 0:64]",
        "  return out0",
    ]


def test_format_stmt_never_raises_on_malformed_nodes():
    t = Tile("t", (128, 4), "float32")
    bad = Instr("vector", "memset", t.region(128, sympy.Symbol("q") / 3), {}, {"value": object()})
    assert format_stmt(bad).startswith("vector.memset ")


def test_format_program():
    k = kernel()
    meta = TensorMeta((300, 64), (64, 1), 0, "float32")
    p = Program("graph0", ["arg0"], [meta], steps=[
        KernelCall(k, ["arg0"], ["buf"], [meta]),
        View("v", "buf", TensorMeta((64, 300), (1, 64), 0, "float32")),
        Empty("e", TensorMeta((0, 3), (3, 1), 0, "float32")),
        Fallback(["f0", "f1"], "aten.native_dropout.default", (Ref("v"), 0.1, True), {}, reason="random",
                 unpack=True),
    ], outputs=[Ref("f0"), None])
    text = format_program(p)
    lines = text.splitlines()
    assert lines[:7] == [
        "program graph0",
        "  input arg0: float32[300, 64]/(64, 1)",
        "  buf: float32[300, 64]/(64, 1) = k0(arg0)",
        "  v = view(buf, float32[64, 300]/(1, 64))",
        "  e = empty(float32[0, 3]/(3, 1))",
        "  f0, f1 = fallback aten.native_dropout.default(v, 0.1, True)  # random",
        "  return (f0, None)",
    ]
    assert "kernel k0" in text and text.count("kernel k0") == 1
