"""The four kernels of the public NKI matrix-multiplication tutorial, as tile IR.

Source: aws-neuron-sdk @226 ``general/nki/examples/matrix_multiplication/matrix_multiplication_nki_kernels.py``
(``nki_matmul_tiled_``, ``nki_matmul_hoist_load_``, ``nki_matmul_block_free_dimension_``,
``nki_matmul_fully_optimized_``) and the published latencies of ``general/nki/tutorials/
matrix_multiplication.rst`` for ``[4096, 8192] @ [8192, 8192]`` bf16 on one trn1 NeuronCore.

Rewritten by hand statement for statement in our IR (loops, tiles, DMAs, instructions), with these
translations of classic-NKI conveniences:
* ``nl.zeros`` of a PSUM accumulator followed by ``+= nl.matmul`` becomes ``nc_matmul`` with
  ``accumulate=(k > 0)`` (the current-NKI idiom; accumulating onto a memset PSUM is undefined);
* ``nl.copy`` PSUM -> SBUF is a VectorE ``tensor_copy``; ``nl.load``/``nl.store`` are ``Dma``;
* ``nl.zeros`` of the SBUF result block in the last kernel is a VectorE ``memset``;
* the hoisted kernel declares its lhsT column as ``[K/128, 128, TILE_N]`` although only ``TILE_M``
  columns are used; we declare what it uses (the size does not enter the cost model).
"""
from __future__ import annotations

import sympy

from neuron_inductor.ir.nodes import (Alloc, Dma, HBMAccess, HBMTensor, Instr, Kernel, Loop, Tile,
                                      TileRegion, loop_var)

M, K, N = 4096, 8192, 8192
TILE_M, TILE_K, TILE_N = 128, 128, 512

#: published latency (ms) per kernel, in tutorial order [MMT]
PUBLISHED_MS = {"tiled": 51.80, "hoisted_loads": 42.96, "free_dim_blocking": 22.07,
                "full_blocking": 6.97}
#: published hardware FLOPs utilization per kernel [MMT]
PUBLISHED_HFU = {"tiled": 0.1098, "hoisted_loads": 0.1324, "free_dim_blocking": 0.2651,
                 "full_blocking": 0.8524}


def _params(m: int, k: int, n: int) -> tuple[HBMTensor, HBMTensor, HBMTensor]:
    lhsT = HBMTensor("lhsT", k * m, "bfloat16", "input")
    rhs = HBMTensor("rhs", k * n, "bfloat16", "input")
    result = HBMTensor("result", m * n, "bfloat16", "output")
    return lhsT, rhs, result


def _block(t: HBMTensor, ld: int, row0, col0, rows: int, cols: int, mid: bool = False) -> HBMAccess:
    """Rows ``row0:row0+rows`` x columns ``col0:col0+cols`` of a row-major [*, ld] matrix; ``mid``
    adds a unit middle axis to match a ``[P, 1, F]`` tile region element for element."""
    pattern = ((ld, rows), (1, 1), (1, cols)) if mid else ((ld, rows), (1, cols))
    return HBMAccess(t, row0 * ld + col0, pattern)


def _at(tile: Tile, starts, sizes) -> TileRegion:
    return TileRegion(tile, tuple(starts), tuple(sizes))


def _matmul(acc: Tile, stationary: TileRegion, moving: TileRegion, k) -> Instr:
    return Instr("tensor", "nc_matmul", acc.full(), {"stationary": stationary, "moving": moving},
                 {"accumulate": sympy.Gt(k, 0)})


def _evict_and_store(acc: Tile, result: HBMTensor, ld: int, row0, col0, name: str) -> list:
    res = Tile(name, (TILE_M, TILE_N), "bfloat16", "sbuf")
    return [Alloc(res),
            Instr("vector", "tensor_copy", res.full(), {"src": acc.full()}),
            Dma(_block(result, ld, row0, col0, TILE_M, TILE_N), res.full())]


def tiled(m_: int = M, k_: int = K, n_: int = N) -> Kernel:
    lhsT, rhs, result = _params(m_, k_, n_)
    m, n, k = loop_var("m"), loop_var("n"), loop_var("k")
    acc = Tile("res_psum", (TILE_M, TILE_N), "float32", "psum")
    lt = Tile("lhsT_tile", (TILE_K, TILE_M), "bfloat16")
    rt = Tile("rhs_tile", (TILE_K, TILE_N), "bfloat16")
    k_loop = Loop(k, k_ // TILE_K, "affine", [
        Alloc(lt), Alloc(rt),
        Dma(lt.full(), _block(lhsT, m_, k * TILE_K, m * TILE_M, TILE_K, TILE_M)),
        Dma(rt.full(), _block(rhs, n_, k * TILE_K, n * TILE_N, TILE_K, TILE_N)),
        _matmul(acc, lt.full(), rt.full(), k)])
    body = [Loop(m, m_ // TILE_M, "affine", [Loop(n, n_ // TILE_N, "affine", [
        Alloc(acc), k_loop,
        *_evict_and_store(acc, result, n_, m * TILE_M, n * TILE_N, "res_sb")])])]
    return Kernel("tiled", [lhsT, rhs], [result], body, plan="nki_matmul_tiled_")


def hoisted_loads(m_: int = M, k_: int = K, n_: int = N) -> Kernel:
    lhsT, rhs, result = _params(m_, k_, n_)
    m, n, k, k2, k3 = (loop_var(v) for v in ("m", "n", "k", "k2", "k3"))
    KT = k_ // TILE_K
    lt = Tile("lhsT_tiles", (TILE_K, KT, TILE_M), "bfloat16")
    rt = Tile("rhs_tiles", (TILE_K, KT, TILE_N), "bfloat16")
    acc = Tile("res_psum", (TILE_M, TILE_N), "float32", "psum")
    n_body = [
        Alloc(rt),
        Loop(k2, KT, "affine", [Dma(_at(rt, (0, k2, 0), (TILE_K, 1, TILE_N)),
                                    _block(rhs, n_, k2 * TILE_K, n * TILE_N, TILE_K, TILE_N, mid=True))]),
        Alloc(acc),
        Loop(k3, KT, "affine", [_matmul(acc, _at(lt, (0, k3, 0), (TILE_K, 1, TILE_M)),
                                        _at(rt, (0, k3, 0), (TILE_K, 1, TILE_N)), k3)]),
        *_evict_and_store(acc, result, n_, m * TILE_M, n * TILE_N, "res_sb")]
    body = [Loop(m, m_ // TILE_M, "affine", [
        Alloc(lt),
        Loop(k, KT, "affine", [Dma(_at(lt, (0, k, 0), (TILE_K, 1, TILE_M)),
                                   _block(lhsT, m_, k * TILE_K, m * TILE_M, TILE_K, TILE_M, mid=True))]),
        Loop(n, n_ // TILE_N, "affine", n_body)])]
    return Kernel("hoisted_loads", [lhsT, rhs], [result], body, plan="nki_matmul_hoist_load_")


def free_dim_blocking(m_: int = M, k_: int = K, n_: int = N, bm_tiles: int = 2,
                      bn_tiles: int = 2) -> Kernel:
    lhsT, rhs, result = _params(m_, k_, n_)
    m, n, bm, bn, k = (loop_var(v) for v in ("m", "n", "bm", "bn", "k"))
    bm2, bn2, k2, k3 = (loop_var(v) for v in ("bm2", "bn2", "k2", "k3"))
    KT = k_ // TILE_K
    lt = Tile("lhsT_tiles", (TILE_K, bm_tiles * KT, TILE_M), "bfloat16")
    rt = Tile("rhs_tiles", (TILE_K, bn_tiles * KT, TILE_N), "bfloat16")
    acc = Tile("res_psum", (TILE_M, TILE_N), "float32", "psum")
    row = (m * bm_tiles + bm2) * TILE_M
    col = (n * bn_tiles + bn2) * TILE_N
    mm_block = Loop(bm2, bm_tiles, "affine", [Loop(bn2, bn_tiles, "affine", [
        Alloc(acc),
        Loop(k3, KT, "affine", [_matmul(acc, _at(lt, (0, bm2 * KT + k3, 0), (TILE_K, 1, TILE_M)),
                                        _at(rt, (0, bn2 * KT + k3, 0), (TILE_K, 1, TILE_N)), k3)]),
        *_evict_and_store(acc, result, n_, row, col, "res_sb")])])
    n_body = [
        Alloc(rt),
        Loop(bn, bn_tiles, "affine", [Loop(k2, KT, "affine", [Dma(
            _at(rt, (0, bn * KT + k2, 0), (TILE_K, 1, TILE_N)),
            _block(rhs, n_, k2 * TILE_K, (n * bn_tiles + bn) * TILE_N, TILE_K, TILE_N, mid=True))])]),
        mm_block]
    body = [Loop(m, m_ // (TILE_M * bm_tiles), "affine", [
        Alloc(lt),
        Loop(bm, bm_tiles, "affine", [Loop(k, KT, "affine", [Dma(
            _at(lt, (0, bm * KT + k, 0), (TILE_K, 1, TILE_M)),
            _block(lhsT, m_, k * TILE_K, (m * bm_tiles + bm) * TILE_M, TILE_K, TILE_M, mid=True))])]),
        Loop(n, n_ // (TILE_N * bn_tiles), "affine", n_body)])]
    return Kernel("free_dim_blocking", [lhsT, rhs], [result], body,
                  plan="nki_matmul_block_free_dimension_")


def full_blocking(m_: int = M, k_: int = K, n_: int = N, bm_tiles: int = 16, bn_tiles: int = 2,
                  bk_tiles: int = 8) -> Kernel:
    lhsT, rhs, result = _params(m_, k_, n_)
    BM, BN, BK = TILE_M * bm_tiles, TILE_N * bn_tiles, TILE_K * bk_tiles
    NBM, NBN, NBK = m_ // BM, n_ // BN, k_ // BK
    n, k, bkr, m, bkl, bn, bm, bk = (loop_var(v) for v in
                                     ("n", "k", "bk_r", "m", "bk_l", "bn", "bm", "bk"))
    m2, bm2, bn2 = loop_var("m2"), loop_var("bm2"), loop_var("bn2")
    res = Tile("result_tiles", (TILE_M, NBM * bm_tiles * bn_tiles, TILE_N), "bfloat16")
    rt = Tile("rhs_tiles", (TILE_K, bk_tiles, BN), "bfloat16")
    lt = Tile("lhsT_tiles", (TILE_K, bk_tiles, BM), "bfloat16")
    acc = Tile("res_tile", (TILE_M, TILE_N), "float32", "psum")
    packed = Tile("result_packed", (TILE_K, BN), "bfloat16")
    res_slot = _at(res, (0, (m * bm_tiles + bm) * bn_tiles + bn, 0), (TILE_M, 1, TILE_N))
    mm = Loop(bn, bn_tiles, "affine", [Loop(bm, bm_tiles, "affine", [
        Alloc(acc),
        Loop(bk, bk_tiles, "affine", [_matmul(acc, _at(lt, (0, bk, bm * TILE_M), (TILE_K, 1, TILE_M)),
                                              _at(rt, (0, bk, bn * TILE_N), (TILE_K, 1, TILE_N)), bk)]),
        Instr("vector", "tensor_tensor", res_slot, {"data1": res_slot, "data2": acc.full()},
              {"op": "add"})])])
    k_body = [
        Alloc(rt),
        Loop(bkr, bk_tiles, "affine", [Dma(_at(rt, (0, bkr, 0), (TILE_K, 1, BN)),
                                           _block(rhs, n_, (bk_tiles * k + bkr) * TILE_K, BN * n,
                                                  TILE_K, BN, mid=True))]),
        Loop(m, NBM, "affine", [
            Alloc(lt),
            Loop(bkl, bk_tiles, "affine", [Dma(_at(lt, (0, bkl, 0), (TILE_K, 1, BM)),
                                               _block(lhsT, m_, (bk_tiles * k + bkl) * TILE_K, BM * m,
                                                      TILE_K, BM, mid=True))]),
            mm])]
    store = Loop(m2, NBM, "affine", [Loop(bm2, bm_tiles, "affine", [
        Alloc(packed),
        Loop(bn2, bn_tiles, "affine", [Instr(
            "vector", "tensor_copy", _at(packed, (0, bn2 * TILE_N), (TILE_K, TILE_N)),
            {"src": _at(res, (0, (m2 * bm_tiles + bm2) * bn_tiles + bn2, 0), (TILE_M, 1, TILE_N))})]),
        Dma(_block(result, n_, (bm_tiles * m2 + bm2) * TILE_K, BN * n, TILE_K, BN), packed.full())])])
    body = [Loop(n, NBN, "affine", [
        Alloc(res),
        Instr("vector", "memset", res.full(), {}, {"value": 0.0}),
        Loop(k, NBK, "sequential", k_body),
        store])]
    return Kernel("full_blocking", [lhsT, rhs], [result], body, plan="nki_matmul_fully_optimized_")


def all_kernels(m_: int = M, k_: int = K, n_: int = N) -> list[Kernel]:
    """The four tutorial kernels in the tutorial's order (slowest first)."""
    return [tiled(m_, k_, n_), hoisted_loads(m_, k_, n_), free_dim_blocking(m_, k_, n_),
            full_blocking(m_, k_, n_)]
