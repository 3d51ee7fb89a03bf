"""Small kernels whose cost follows directly from the documented per-instruction numbers."""
from __future__ import annotations

import pytest
import sympy

from neuron_inductor.costmodel import estimate_kernel, estimate_program, format_cost_table
from neuron_inductor.costmodel.instrs import ACCESS_OVERHEAD, MIN_II
from neuron_inductor.ir.nodes import (Alloc, Dma, HBMAccess, HBMTensor, Instr, Kernel, Loop, Tile,
                                      TileRegion, loop_var)
from neuron_inductor.target import TRN1, TRN2

from tutorial_kernels import all_kernels


def copy_kernel(rows: int, cols: int, chunk: int, dtype: str = "float32", name: str = "copy") -> Kernel:
    """out = in, streamed through SBUF in [128, chunk] tiles."""
    src = HBMTensor("x", rows * cols, dtype, "input")
    dst = HBMTensor("y", rows * cols, dtype, "output")
    i, j = loop_var("i"), loop_var("j")
    t = Tile("t", (128, chunk), dtype)
    off = i * 128 * cols + j * chunk
    body = [Loop(i, rows // 128, "affine", [Loop(j, cols // chunk, "affine", [
        Alloc(t),
        Dma(t.full(), HBMAccess(src, off, ((cols, 128), (1, chunk)))),
        Dma(HBMAccess(dst, off, ((cols, 128), (1, chunk))), t.full())])])]
    return Kernel(name, [src], [dst], body)


def matmul_only_kernel(n_mm: int, dtype: str = "bfloat16") -> Kernel:
    """One load of each operand, then ``n_mm`` back-to-back [128x128] x [128x512] matmuls."""
    a = HBMTensor("a", 128 * 128, dtype, "input")
    b = HBMTensor("b", 128 * 512, dtype, "input")
    out = HBMTensor("out", 128 * 512, "float32", "output")
    sa, sb = Tile("sa", (128, 128), dtype), Tile("sb", (128, 512), dtype)
    acc, res = Tile("acc", (128, 512), "float32", "psum"), Tile("res", (128, 512), "float32")
    k = loop_var("k")
    body = [Alloc(sa), Alloc(sb), Alloc(acc), Alloc(res),
            Dma(sa.full(), HBMAccess(a, 0, ((128, 128), (1, 128)))),
            Dma(sb.full(), HBMAccess(b, 0, ((512, 128), (1, 512)))),
            Loop(k, n_mm, "affine", [Instr("tensor", "nc_matmul", acc.full(),
                                           {"stationary": sa.full(), "moving": sb.full()},
                                           {"accumulate": sympy.Gt(k, 0)})]),
            Instr("vector", "tensor_copy", res.full(), {"src": acc.full()}),
            Dma(HBMAccess(out, 0, ((512, 128), (1, 512))), res.full())]
    return Kernel("mm", [a, b], [out], body)


def test_big_copy_is_memory_bound():
    k = estimate_kernel(copy_kernel(4096, 8192, 2048), TRN1)
    assert k.bound == "memory"
    assert k.hbm_bytes == 2 * 4096 * 8192 * 4
    # never faster than the DMA engines at full efficiency, nor than HBM
    assert k.seconds >= k.hbm_bytes / (TRN1.dma_engines * TRN1.dma_engine_bytes_per_s)
    assert k.seconds >= k.hbm_bytes / TRN1.hbm_bytes_per_s
    assert k.utilization["dma"] > 0.9
    assert k.counts["dma"] == 2 * 32 * 4


def test_big_matmul_is_compute_bound():
    k = estimate_kernel(matmul_only_kernel(20000), TRN1)
    assert k.bound == "compute"
    # max(N_moving, 64) cycles plus the measured per-pass overhead (target.py, calibrate.py)
    per_mm = (512 + TRN1.tensor_pass_overhead_bf16) / TRN1.tensor_clock_hz
    assert k.busy_s["tensor"] == pytest.approx(20000 * per_mm)
    assert k.mfu > 0.85


def test_fp32_matmul_is_four_times_slower():
    bf16 = estimate_kernel(matmul_only_kernel(1000, "bfloat16"), TRN1)
    fp32 = estimate_kernel(matmul_only_kernel(1000, "float32"), TRN1)
    # four passes, each with the measured fp32 per-pass overhead (target.py)
    ratio = 4 * (512 + TRN1.tensor_pass_overhead_fp32) / (512 + TRN1.tensor_pass_overhead_bf16)
    assert fp32.busy_s["tensor"] == pytest.approx(ratio * bf16.busy_s["tensor"])


def test_single_small_dma_is_overhead_bound():
    k = estimate_kernel(copy_kernel(128, 64, 64), TRN1)
    assert k.bound == "overhead"
    assert k.seconds >= 2 * TRN1.dma_fixed_s  # load then dependent store


def test_utilization_never_exceeds_one():
    kernels = all_kernels(1024, 1024, 2048) + [copy_kernel(1024, 4096, 512),
                                               matmul_only_kernel(64), copy_kernel(128, 64, 64)]
    for k in kernels:
        for target in (TRN1, TRN2):
            cost = estimate_kernel(k, target)
            assert all(0.0 <= u <= 1.0 for u in cost.utilization.values()), (k.name, cost.utilization)
            assert cost.seconds >= max(cost.busy_s.values())


def test_small_dma_chunks_are_less_efficient():
    """Same bytes: 256 B per partition per transfer is several times slower than 8 KiB (§5.4)."""
    small = estimate_kernel(copy_kernel(1024, 4096, 64), TRN1)   # 256 B per partition
    large = estimate_kernel(copy_kernel(1024, 4096, 2048), TRN1)  # 8 KiB per partition
    assert small.hbm_bytes == large.hbm_bytes
    assert small.seconds > 3 * large.seconds


def test_strided_dma_pays_per_element_descriptors():
    """A transposing load (innermost HBM stride != 1) moves one element per descriptor."""
    src = HBMTensor("x", 512 * 128, "float32", "input")
    t = Tile("t", (128, 512), "float32")
    contiguous = Kernel("c", [src], [], [Alloc(t), Dma(t.full(), HBMAccess(src, 0, ((512, 128), (1, 512))))])
    transposed = Kernel("t", [src], [], [Alloc(t), Dma(t.full(), HBMAccess(src, 0, ((1, 128), (128, 512))))])
    c, tr = estimate_kernel(contiguous, TRN1), estimate_kernel(transposed, TRN1)
    assert tr.seconds > 20 * c.seconds


def test_ragged_last_tile_is_summed_exactly():
    """sizes min(512, 1300 - 512 i): iterations of 512, 512 and 276 elements per partition."""
    i = loop_var("i")
    t = Tile("t", (128, 512), "float32")
    u = Tile("u", (128, 512), "float32")
    f = sympy.Min(512, 1300 - 512 * i)
    r_t, r_u = TileRegion(t, (0, 0), (128, f)), TileRegion(u, (0, 0), (128, f))
    k = Kernel("ragged", [], [], [Alloc(t), Alloc(u), Loop(i, 3, "affine", [
        Instr("vector", "tensor_copy", r_u, {"src": r_t})])])
    cost = estimate_kernel(k, TRN1)
    cycles = sum(max(MIN_II, n) + ACCESS_OVERHEAD for n in (512, 512, 276))
    assert cost.busy_s["vector"] == pytest.approx(cycles / TRN1.vector_clock_hz)


def _load_then_compute(kind: str) -> Kernel:
    src = HBMTensor("x", 128 * 2048 * 16, "float32", "input")
    i = loop_var("i")
    t, u = Tile("t", (128, 2048), "float32"), Tile("u", (128, 2048), "float32")
    return Kernel(kind, [src], [], [Loop(i, 16, kind, [
        Alloc(t), Alloc(u),
        Dma(t.full(), HBMAccess(src, i * 128 * 2048, ((2048, 128), (1, 2048)))),
        Instr("scalar", "activation", u.full(), {"data": t.full()}, {"op": "exp"})])])


def test_affine_iterations_overlap_sequential_ones_do_not():
    affine = estimate_kernel(_load_then_compute("affine"), TRN1)
    seq = estimate_kernel(_load_then_compute("sequential"), TRN1)
    assert affine.busy_s == seq.busy_s
    # sequential: every iteration pays load latency + dependent activation back to back
    one = seq.seconds / 16
    assert one >= TRN1.dma_fixed_s + (2048 + ACCESS_OVERHEAD) / TRN1.scalar_clock_hz
    assert affine.seconds < 0.75 * seq.seconds


def test_program_sum_and_critical_kernels():
    ks = [copy_kernel(128, 64, 64, name="tiny"), matmul_only_kernel(5000),
          copy_kernel(4096, 4096, 2048, name="big_copy")]
    pc = estimate_program(ks, TRN2)
    assert pc.seconds == pytest.approx(sum(k.seconds for k in pc.kernels))
    assert [c.name for c in pc.critical][0] == max(pc.kernels, key=lambda c: c.seconds).name
    assert "tiny" not in [c.name for c in pc.critical]
    table = format_cost_table(pc)
    for name in ("tiny", "mm", "big_copy", "total", "critical"):
        assert name in table


def test_targets_differ():
    k = matmul_only_kernel(2000)
    assert estimate_kernel(k, TRN2).seconds > estimate_kernel(k, TRN1).seconds  # 2.4 vs 2.8 GHz


def test_documented_cycle_counts_per_engine():
    """activation+reduce = max(64, N) + 64 (+ access overhead); GpSimd iota = 150 + N."""
    t, u = Tile("t", (128, 1000), "float32"), Tile("u", (128, 1000), "float32")
    r, idx = Tile("r", (128, 1), "float32"), Tile("idx", (128, 1000), "int32")
    k = Kernel("engines", [], [], [Alloc(t), Alloc(u), Alloc(r), Alloc(idx),
        Instr("scalar", "activation", u.full(), {"data": t.full(), "reduce_res": r.full()},
              {"op": "exp", "reduce_op": "add"}),
        Instr("gpsimd", "iota", idx.full(), {}, {"pattern": [[1, 1000]], "offset": 0})])
    cost = estimate_kernel(k, TRN1)
    assert cost.busy_s["scalar"] == pytest.approx((1000 + 64 + ACCESS_OVERHEAD) / TRN1.scalar_clock_hz)
    assert cost.busy_s["gpsimd"] == pytest.approx((150 + 1000) / TRN1.gpsimd_clock_hz)
    # independent instructions on different engines overlap
    assert cost.seconds == pytest.approx(max(cost.busy_s.values()))


def test_gather_and_hbm_to_hbm_dma_are_costed():
    x = HBMTensor("x", 1000 * 256, "bfloat16", "input")
    y = HBMTensor("y", 128 * 256, "bfloat16", "output")
    idx, rows = Tile("idx", (128, 1), "int32"), Tile("rows", (128, 256), "bfloat16")
    gather = Dma(rows.full(), HBMAccess(x, 0, ((256, 128), (1, 256)), indirect=idx.full()))
    copy = Dma(HBMAccess(y, 0, ((256, 128), (1, 256))), HBMAccess(x, 0, ((256, 128), (1, 256))))
    k = Kernel("g", [x], [y], [Alloc(idx), Alloc(rows), gather, copy])
    cost = estimate_kernel(k, TRN1)
    assert cost.hbm_bytes == 128 * 256 * 2 * 3  # gather reads; the copy reads and writes
    assert cost.counts["dma"] == 2
