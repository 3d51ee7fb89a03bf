"""One test per simulator refusal: each names the rule, the kernel and (when live) the line."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

from neuron_inductor.runtime import sim
from neuron_inductor.runtime.sim import SimulatorError, nki, nl, nisa

X = np.arange(128 * 64, dtype=np.float32)


def refused(kernel, rule: str, *args) -> SimulatorError:
    with pytest.raises(SimulatorError) as info:
        kernel(*(args or (X,)))
    err = info.value
    msg = str(err)
    assert f"[{rule}]" in msg and err.rule == rule, msg
    assert f"kernel '{kernel.__name__}'" in msg, msg
    return err


def test_partition_256():
    @nki.jit
    def too_many_partitions(x):
        nl.ndarray((256, 4), dtype=nl.float32, buffer=nl.sbuf)

    err = refused(too_many_partitions, "partition-limit")
    assert "256" in str(err)
    # the line reported is the allocation line of the kernel
    src, first = inspect.getsourcelines(too_many_partitions.fn)
    assert err.lineno == first + 2 and "nl.ndarray((256, 4)" in str(err)


def test_one_dimensional_tile():
    @nki.jit
    def flat_tile(x):
        nl.ndarray((128,), dtype=nl.float32, buffer=nl.sbuf)

    refused(flat_tile, "tile-rank")


def test_psum_nine_banks_live():
    @nki.jit
    def nine_banks(x):
        tiles = [nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum) for _ in range(9)]
        return tiles

    err = refused(nine_banks, "psum-capacity")
    assert "9 banks" in str(err)


def test_psum_tile_over_one_bank():
    @nki.jit
    def wide_psum(x):
        nl.ndarray((128, 513), dtype=nl.float32, buffer=nl.psum)

    err = refused(wide_psum, "psum-capacity")
    assert "2052 bytes" in str(err) and "wide_psum" in str(err)


def test_sbuf_overflow_against_target_and_override():
    @nki.jit
    def sbuf_hog(x):
        a = nl.ndarray((128, 30000), dtype=nl.float32, buffer=nl.sbuf)  # 120000 B / partition
        b = nl.ndarray((128, 30000), dtype=nl.float32, buffer=nl.sbuf)
        return a, b

    err = refused(sbuf_hog, "sbuf-capacity")  # trn2: 208 KiB per partition
    assert "b: sbuf float32[128, 30000]" in str(err)  # the tile is named by its variable

    @nki.jit
    def small_sbuf(x):
        nl.ndarray((128, 300), dtype=nl.float32, buffer=nl.sbuf)

    with sim.override_limits(sbuf_bytes_per_partition=1024):
        refused(small_sbuf, "sbuf-capacity")
    small_sbuf(X)  # fits again once the override ends


def _matmul_refusal(k1: int, m: int, k2: int, n: int, s_dtype=nl.bfloat16, m_dtype=nl.bfloat16):
    @nki.jit
    def bad_matmul(x):
        s = nl.ndarray((k1, m), dtype=s_dtype, buffer=nl.sbuf)
        mv = nl.ndarray((k2, n), dtype=m_dtype, buffer=nl.sbuf)
        acc = nl.ndarray((min(m, 128), min(n, 512)), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=s, moving=mv)

    return bad_matmul


@pytest.mark.parametrize("shape", [(128, 64, 96, 64), (128, 129, 128, 64), (128, 64, 128, 513)],
                         ids=["k-mismatch", "m-over-128", "n-over-512"])
def test_bad_matmul_shape(shape):
    refused(_matmul_refusal(*shape), "matmul-shape")


def test_matmul_fp32_with_bf16():
    refused(_matmul_refusal(64, 64, 64, 64, nl.float32, nl.bfloat16), "matmul-dtype")


def test_matmul_operand_in_psum():
    @nki.jit
    def psum_operand(x):
        s = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)
        mv = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.sbuf)
        acc = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=s, moving=mv)

    refused(psum_operand, "memory")


def test_reduce_on_partition_axis():
    @nki.jit
    def partition_reduce(x):
        t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((1, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=r, op=nl.add, data=t, axis=(0,))

    refused(partition_reduce, "reduce-axis")


def test_reduce_axes_must_end_at_last():
    @nki.jit
    def middle_reduce(x):
        t = nl.ndarray((8, 4, 8), dtype=nl.float32, buffer=nl.sbuf)
        r = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=r, op=nl.add, data=t, axis=(1,))

    refused(middle_reduce, "reduce-axis")


def test_gpsimd_reading_psum():
    @nki.jit
    def gpsimd_psum(x):
        p = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.psum)
        s = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=s, src=p, engine=nisa.gpsimd_engine)

    err = refused(gpsimd_psum, "gpsimd-no-psum")
    assert "gpsimd" in str(err) and "p: psum" in str(err)


def test_iota_into_psum():
    @nki.jit
    def iota_psum(x):
        p = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.psum)
        nisa.iota(dst=p, pattern=[[1, 8]], offset=0)

    refused(iota_psum, "gpsimd-no-psum")


def test_tensor_tensor_both_psum():
    @nki.jit
    def both_psum(x):
        a = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.psum)
        b = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.psum)
        d = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=d, data1=a, data2=b, op=nl.add)

    refused(both_psum, "psum-inputs")


def test_compute_on_hbm_operand():
    @nki.jit
    def hbm_compute(x):
        d = nl.ndarray((1, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=d, op=nl.exp, data=x.ap(pattern=[[8, 1], [1, 8]], offset=0))

    refused(hbm_compute, "memory")


def test_oob_load():
    @nki.jit
    def oob_load(x):
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.ap(pattern=[[64, 128], [1, 64]], offset=1))

    err = refused(oob_load, "out-of-bounds")
    assert "8192" in str(err)


def test_oob_indirect_index():
    @nki.jit
    def oob_gather(x):
        idx = nl.ndarray((4, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.iota(dst=idx, pattern=[[0, 1]], offset=0, channel_multiplier=1000)
        t = nl.ndarray((4, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.reshape((128, 64)).ap(pattern=[[64, 4], [1, 64]], offset=0,
                                                         vector_offset=idx, indirect_dim=0))

    refused(oob_gather, "out-of-bounds", X.reshape(128, 64))  # rows of 64: stride 64


def test_tile_slice_out_of_bounds():
    @nki.jit
    def oob_slice(x):
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        return t[0:128, 0:65]

    refused(oob_slice, "out-of-bounds")


def test_partition_step_refused():
    @nki.jit
    def strided_partitions(x):
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        return t[0:128:2, 0:64]

    refused(strided_partitions, "partition-stride")


def test_dma_touching_psum():
    @nki.jit
    def dma_psum(x):
        p = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.dma_copy(dst=p, src=x.ap(pattern=[[64, 128], [1, 64]], offset=0))

    refused(dma_psum, "memory")


def test_dma_shape_mismatch():
    @nki.jit
    def dma_mismatch(x):
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.ap(pattern=[[64, 64], [1, 64]], offset=0))  # 4096 != 8192

    refused(dma_mismatch, "dma-elements")


def test_partition_mismatch():
    @nki.jit
    def parts(x):
        a = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=a, src=b)

    refused(parts, "partition-mismatch")


def test_activation_bias_shape():
    @nki.jit
    def bad_bias(x):
        a = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((64, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=a, op=nl.exp, data=a, bias=b)

    refused(bad_bias, "shape")


def test_output_not_written():
    @nki.jit
    def half_written(x):
        out = nl.ndarray((128,), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((1, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.ap(pattern=[[64, 1], [1, 64]], offset=0))
        nisa.dma_copy(dst=out.ap(pattern=[[64, 1], [1, 64]], offset=0), src=t)
        return out

    err = refused(half_written, "output-not-written")
    assert "out" in str(err) and "64 of 128" in str(err)


def test_shared_hbm_inside_loop():
    @nki.jit
    def output_in_loop(x):
        for i in nl.affine_range(2):
            nl.ndarray((8,), dtype=nl.float32, buffer=nl.shared_hbm)

    refused(output_in_loop, "shared-hbm-top-level")


def test_use_out_of_scope():
    @nki.jit
    def escaped_tile(x):
        for i in nl.affine_range(2):
            t = nl.ndarray((1, 64), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x.ap(pattern=[[64, 1], [1, 64]], offset=0))
        out = nl.ndarray((64,), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out.ap(pattern=[[64, 1], [1, 64]], offset=0), src=t)
        return out

    err = refused(escaped_tile, "scope")
    assert "t: sbuf" in str(err)


def test_unsupported_dtype():
    @nki.jit
    def f64_tile(x):
        nl.ndarray((8, 8), dtype=np.float64, buffer=nl.sbuf)

    refused(f64_tile, "dtype")


def test_instruction_outside_kernel():
    with pytest.raises(SimulatorError, match=r"\[outside-kernel\]"):
        nisa.memset(dst=None, value=0)


def test_positional_operands_refused():
    @nki.jit
    def positional(x):
        t = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(t, 0.0)

    refused(positional, "operand")
