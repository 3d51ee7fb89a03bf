"""Hand-built tile IR kernels used by the codegen tests (independent of lowering).

Each builder returns the kernel plus a numpy reference so tests can run the generated source through
the simulator and compare.
"""
from __future__ import annotations

import numpy as np
import sympy

from neuron_inductor.ir import (Alloc, Dma, HBMAccess, HBMTensor, Instr, Kernel, Loop, Tile, TileRegion,
                                loop_var)

P = 128


def ragged(extent: int, tile: int, var: sympy.Symbol) -> sympy.Expr:
    return sympy.Min(tile, extent - tile * var)


def pointwise_ragged(rows: int = 300, cols: int = 700, free: int = 512) -> Kernel:
    """out = exp(x) * 2 + x over a [rows, cols] tensor, tiles [128, 512] with ragged last tiles."""
    x = HBMTensor("x", rows * cols, "float32")
    out = HBMTensor("out0", rows * cols, "float32", "output")
    i, j = loop_var("i0"), loop_var("i1")
    pr, fr = ragged(rows, P, i), ragged(cols, free, j)
    xt, et, yt = (Tile(n, (P, free), "float32") for n in ("x_t", "e_t", "y_t"))
    off = P * cols * i + free * j
    inner = Loop(j, -(-cols // free), "affine", [
        Alloc(xt), Alloc(et), Alloc(yt),
        Dma(xt.region(pr, fr), HBMAccess(x, off, ((cols, pr), (1, fr)))),
        Instr("scalar", "activation", et.region(pr, fr), {"data": xt.region(pr, fr)},
              {"op": "exp", "scale": 1.0}),
        Instr("vector", "tensor_scalar", et.region(pr, fr), {"data": et.region(pr, fr)},
              {"op0": "multiply", "operand0": 2.0}),
        Instr("vector", "tensor_tensor", yt.region(pr, fr),
              {"data1": et.region(pr, fr), "data2": xt.region(pr, fr)}, {"op": "add"}),
        Dma(HBMAccess(out, off, ((cols, pr), (1, fr))), yt.region(pr, fr)),
    ])
    body = [Loop(i, -(-rows // P), "affine", [inner])]
    return Kernel("k_pointwise", [x], [out], body,
                  provenance=[f"exp = aten.exp.default(x)  float32[{rows}, {cols}]",
                              "mul = aten.mul.Tensor(exp, 2.0)", "add = aten.add.Tensor(mul, x)"],
                  plan=f"rows on partitions in 128-row tiles, columns in {free}-wide chunks; "
                       "ragged last tiles by min().")


def pointwise_ref(x: np.ndarray) -> np.ndarray:
    return np.exp(x) * 2 + x


def matmul_k_tiled(m: int = 200, k: int = 300, n: int = 96) -> Kernel:
    """out[m, n] = a[m, k] @ b[k, n]; K > 128 accumulates in one PSUM tile (accumulate=kk > 0)."""
    a = HBMTensor("a", m * k, "float32")
    b = HBMTensor("b", k * n, "float32")
    out = HBMTensor("out0", m * n, "float32", "output")
    im, ik = loop_var("i0"), loop_var("i1")
    pm, pk = ragged(m, P, im), ragged(k, P, ik)
    at, bt = Tile("a_t", (P, P), "float32"), Tile("b_t", (P, n), "float32")
    acc, res = Tile("acc", (P, n), "float32", "psum"), Tile("res", (P, n), "float32")
    kloop = Loop(ik, -(-k // P), "affine", [
        Alloc(at), Alloc(bt),
        # stationary wants [K, M]: read a transposed through the access pattern (partition stride 1)
        Dma(at.region(pk, pm), HBMAccess(a, P * k * im + P * ik, ((1, pk), (k, pm)))),
        Dma(bt.region(pk, n), HBMAccess(b, P * n * ik, ((n, pk), (1, n)))),
        Instr("tensor", "nc_matmul", acc.region(pm, n),
              {"stationary": at.region(pk, pm), "moving": bt.region(pk, n)},
              {"accumulate": sympy.Gt(ik, 0)}),
    ])
    body = [Loop(im, -(-m // P), "affine", [
        Alloc(acc), Alloc(res), kloop,
        Instr("vector", "tensor_copy", res.region(pm, n), {"src": acc.region(pm, n)}),
        Dma(HBMAccess(out, P * n * im, ((n, pm), (1, n))), res.region(pm, n)),
    ])]
    return Kernel("k_matmul", [a, b], [out], body, provenance=[f"mm = aten.mm.default(a, b)  [{m},{k}]x[{k},{n}]"],
                  plan="M in 128-row tiles; K in 128 tiles accumulated in fp32 PSUM; N whole (<= 512).")


def gather_rows(vocab: int = 50, dim: int = 64, count: int = 200) -> Kernel:
    """out[i, :] = table[idx[i], :] with int64 indices passed as int32 word pairs."""
    table = HBMTensor("table", vocab * dim, "float32")
    idx = HBMTensor("idx", 2 * count, "int32")
    out = HBMTensor("out0", count * dim, "float32", "output")
    i = loop_var("i0")
    pr = ragged(count, P, i)
    it, rt = Tile("idx_t", (P, 1), "uint32"), Tile("rows", (P, dim), "float32")
    body = [Loop(i, -(-count // P), "affine", [
        Alloc(it), Alloc(rt),
        Dma(it.region(pr, 1), HBMAccess(idx, 2 * P * i, ((2, pr), (1, 1)))),  # low words
        Dma(rt.region(pr, dim), HBMAccess(table, 0, ((dim, pr), (1, dim)), indirect=it.region(pr, 1),
                                               view=(vocab, dim))),
        Dma(HBMAccess(out, P * dim * i, ((dim, pr), (1, dim))), rt.region(pr, dim)),
    ])]
    return Kernel("k_gather", [table, idx], [out], body, provenance=["emb = aten.embedding.default(table, idx)"],
                  plan="128 indices per tile; one indirect DMA gathers their rows.")


def row_reduce(rows: int = 300, cols: int = 700, free: int = 512) -> Kernel:
    """sum and max over the last axis of [rows, cols] -> two [rows] outputs."""
    x = HBMTensor("x", rows * cols, "float32")
    osum = HBMTensor("out0", rows, "float32", "output")
    omax = HBMTensor("out1", rows, "float32", "output")
    i, j = loop_var("i0"), loop_var("i1")
    pr, fr = ragged(rows, P, i), ragged(cols, free, j)
    xt, part = Tile("x_t", (P, free), "float32"), Tile("part", (P, 1), "float32")
    acc, mx = Tile("acc", (P, 1), "float32"), Tile("mx", (P, 1), "float32")
    chunk = Loop(j, -(-cols // free), "sequential", [
        Alloc(xt), Alloc(part),
        Dma(xt.region(pr, fr), HBMAccess(x, P * cols * i + free * j, ((cols, pr), (1, fr)))),
        Instr("vector", "tensor_reduce", part.region(pr, 1), {"data": xt.region(pr, fr)},
              {"op": "add", "axis": (1,)}),
        Instr("vector", "tensor_tensor", acc.region(pr, 1), {"data1": acc.region(pr, 1),
                                                             "data2": part.region(pr, 1)}, {"op": "add"}),
        Instr("vector", "tensor_reduce", part.region(pr, 1), {"data": xt.region(pr, fr)},
              {"op": "maximum", "axis": (1,)}),
        Instr("vector", "tensor_tensor", mx.region(pr, 1), {"data1": mx.region(pr, 1),
                                                            "data2": part.region(pr, 1)}, {"op": "maximum"}),
    ])
    body = [Loop(i, -(-rows // P), "affine", [
        Alloc(acc), Alloc(mx),
        Instr("vector", "memset", acc.region(pr, 1), {}, {"value": 0.0}),
        Instr("gpsimd", "memset", mx.region(pr, 1), {}, {"value": float("-inf")}),
        chunk,
        Dma(HBMAccess(osum, P * i, ((1, pr), (1, 1))), acc.region(pr, 1)),
        Dma(HBMAccess(omax, P * i, ((1, pr), (1, 1))), mx.region(pr, 1)),
    ])]
    return Kernel("k_reduce", [x], [osum, omax], body,
                  provenance=["s = aten.sum.dim_IntList(x, [1])", "m = aten.amax.default(x, [1])"],
                  plan="rows on partitions; columns streamed in chunks, partial reductions accumulated.")


ALL = {"pointwise": pointwise_ragged, "matmul": matmul_k_tiled, "gather": gather_rows, "reduce": row_reduce}


def copy_kernel(name: str, numel: int, dtype: str) -> Kernel:
    """out = in, element for element through one [1, numel] SBUF tile (a wrapper round-trip probe)."""
    src = HBMTensor("in0", numel, dtype)
    out = HBMTensor("out0", numel, dtype, "output")
    t = Tile("t", (1, numel), dtype)
    body = [Alloc(t), Dma(t.full(), HBMAccess(src, 0, ((numel, 1), (1, numel)))),
            Dma(HBMAccess(out, 0, ((numel, 1), (1, numel))), t.full())]
    return Kernel(name, [src], [out], body, provenance=[f"copy {dtype}[{numel}]"])
