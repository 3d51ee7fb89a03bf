"""One refusal per instruction-specification rule: the smallest kernel breaking it, run on the
simulator, must be refused with the rule id and the documentation citation.

``instr-known`` and ``dtype-known`` cannot be spelled against the simulator (an unknown ``nisa.*``
or ``nl.<dtype>`` is an AttributeError before any instruction runs); tests/spec covers them through
the checker and the static lint. ``test_every_rule_has_a_refusal`` keeps this list complete.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from neuron_inductor import config
from neuron_inductor.runtime.sim import SimulatorError, nki, nl, nisa
from neuron_inductor.spec import RULES

pytestmark = pytest.mark.nonconforming  # every kernel here breaks a rule on purpose

F = 8
X = np.linspace(-1.0, 1.0, 16 * F, dtype=np.float32)

#: rules the simulator cannot be asked about (see the module docstring)
STATIC_ONLY = {"instr-known", "dtype-known"}


def refused(rule: str, body, *args, target: str = "trn2") -> SimulatorError:
    """Run ``body(x_tile, ...)`` inside a kernel on ``target``; it must be refused for ``rule``."""
    def kernel(x, *rest):
        t = nl.ndarray((16, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x.ap(pattern=[[F, 16], [1, F]], offset=0))
        body(t, *rest)

    kernel.__name__ = f"k_{rule.replace('-', '_')}"
    with config.patch(target=target), pytest.raises(SimulatorError) as info:
        nki.jit(kernel)(*(args or (X,)))
    err = info.value
    assert err.rule == rule and f"[{rule}]" in str(err), str(err)
    assert "NKI docs:" in str(err), str(err)  # the citation travels with the refusal
    return err


def sb(shape=(16, F), dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


def ps(shape=(16, F), dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.psum)


RUNTIME_RULES = []


def covers(rule):
    RUNTIME_RULES.append(rule)
    return lambda fn: fn


@covers("engine-allowed")
def test_engine_allowed():
    refused("engine-allowed", lambda t: nisa.memset(dst=t, value=0.0, engine=nisa.scalar_engine))


@covers("tensor-copy-scalar-v2")
def test_tensor_copy_on_scalar_engine_of_trn1():
    refused("tensor-copy-scalar-v2",
            lambda t: nisa.tensor_copy(dst=sb(), src=t, engine=nisa.scalar_engine), target="trn1")


def test_tensor_copy_on_scalar_engine_of_trn2_is_fine():
    def kernel(x):
        t = sb()
        nisa.dma_copy(dst=t, src=x.ap(pattern=[[F, 16], [1, F]], offset=0))
        nisa.tensor_copy(dst=sb(), src=t, engine=nisa.scalar_engine)

    with config.patch(target="trn2"):
        nki.jit(kernel)(X)


@covers("alu-op-table")
def test_divide_is_not_an_alu_operator():
    refused("alu-op-table", lambda t: nisa.tensor_tensor(dst=sb(), data1=t, data2=t, op=nl.divide))


@covers("alu-op-engine")
def test_comparison_is_vector_only():
    refused("alu-op-engine", lambda t: nisa.tensor_tensor(dst=sb(), data1=t, data2=t, op=nl.greater,
                                                          engine=nisa.gpsimd_engine))


def test_add_on_scalar_engine_only_from_v3():
    refused("alu-op-engine", lambda t: nisa.tensor_scalar(dst=sb(), data=t, op0=nl.add, operand0=1.0,
                                                          engine=nisa.scalar_engine), target="trn1")


@covers("tensor-scalar-gpsimd-rsqrt")
def test_tensor_scalar_on_gpsimd_only_for_rsqrt():
    refused("tensor-scalar-gpsimd-rsqrt", lambda t: nisa.tensor_scalar(
        dst=sb(), data=t, op0=nl.greater, operand0=0.0, engine=nisa.gpsimd_engine))


@covers("tensor-scalar-scalar-combo")
def test_scalar_engine_operator_combinations_on_trn2():
    refused("tensor-scalar-scalar-combo", lambda t: nisa.tensor_scalar(
        dst=sb(), data=t, op0=nl.add, operand0=1.0, op1=nl.multiply, operand1=2.0,
        engine=nisa.scalar_engine))


@covers("op-class-mix")
def test_bitvec_and_arithmetic_do_not_mix():
    def body(t):
        i = sb(dtype=nl.int32)
        nisa.iota(dst=i, pattern=[[1, F]], offset=0)
        nisa.tensor_scalar(dst=i, data=i, op0=nl.bitwise_and, operand0=3, op1=nl.add, operand1=1.0)

    refused("op-class-mix", body)


@covers("bitvec-integer")
def test_bitvec_needs_integers():
    refused("bitvec-integer", lambda t: nisa.tensor_tensor(dst=sb(), data1=t, data2=t, op=nl.bitwise_and))


@covers("tensor-scalar-fp32-operand")
def test_tensor_scalar_tile_operand_must_be_fp32():
    def body(t):
        c = sb((16, 1), nl.int32)
        nisa.iota(dst=c, pattern=[[0, 1]], offset=1)
        nisa.tensor_scalar(dst=sb(), data=t, op0=nl.equal, operand0=c)

    refused("tensor-scalar-fp32-operand", body)


def test_tensor_scalar_bitvec_int_tile_operand_refused():
    """The NKI frontend refuses ``operand0`` int32 tiles with bitvec operators too ("operand0 must be
    float32, got i32"): only data/dst are integer there."""
    def body(t):
        c = sb((16, 1), nl.int32)
        i = sb((16, F), nl.int32)
        nisa.iota(dst=c, pattern=[[0, 1]], offset=1)
        nisa.memset(dst=i, value=0)
        nisa.tensor_scalar(dst=i, data=i, op0=nl.bitwise_or, operand0=c)

    refused("tensor-scalar-fp32-operand", body)


@covers("transpose-nonfinite-v2")
def test_trn1_tensor_engine_transpose_of_infinities_refused():
    """NeuronCore-v2's TensorE transpose "is not bit-accurate if the input data contains NaN/Inf";
    nc_matmul(is_transpose=True) is the same TensorE transpose."""
    def body(t):
        u = sb()
        nisa.memset(dst=u, value=float("-inf"))
        nisa.nc_transpose(dst=ps((F, 16)), data=u, engine=nisa.tensor_engine)

    def body_mm(t):
        u = sb((8, 8))
        nisa.memset(dst=u, value=float("nan"))
        nisa.nc_matmul(dst=ps((8, 8)), stationary=u, moving=t[0:8, 0:8], is_transpose=True)

    refused("transpose-nonfinite-v2", body, target="trn1")
    refused("transpose-nonfinite-v2", body_mm, target="trn1")


def test_transposes_of_infinities_are_exact_elsewhere():
    """VectorE on trn1 and TensorE from NeuronCore-v3 (trn2) move NaN/Inf bit-exactly."""
    v = X.copy()
    v[[0, 5, 77]] = [np.inf, -np.inf, np.nan]
    for target, engine in (("trn1", nisa.vector_engine), ("trn2", nisa.tensor_engine)):
        def kernel(x):
            t = sb()
            nisa.dma_copy(dst=t, src=x.ap(pattern=[[F, 16], [1, F]], offset=0))
            if engine is nisa.tensor_engine:
                d = ps((F, 16))
                nisa.nc_transpose(dst=d, data=t, engine=engine)
            else:
                d = sb((F, 16))
                nisa.nc_transpose(dst=d, data=t, engine=engine)  # [16, 8] fits VectorE's [32, 32]
            o = sb((F, 16))
            nisa.tensor_copy(dst=o, src=d)
            out = nl.ndarray((F * 16,), dtype=nl.float32, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out.ap(pattern=[[16, F], [1, 16]], offset=0), src=o)
            return out

        with config.patch(target=target):
            got = nki.jit(kernel)(v)
        np.testing.assert_array_equal(got.reshape(F, 16), v.reshape(16, F).T)


def _to_int(values, dtype=nl.int32, via_dma=False):
    n = len(values)

    def kernel(x):
        t = sb((1, n))
        nisa.dma_copy(dst=t, src=x.ap(pattern=[[n, 1], [1, n]], offset=0))
        i = sb((1, n), dtype)
        out = nl.ndarray((n,), dtype=dtype, buffer=nl.shared_hbm)
        if via_dma:
            nisa.dma_copy(dst=out.ap(pattern=[[n, 1], [1, n]], offset=0), src=t)
            return out
        nisa.tensor_copy(dst=i, src=t)
        nisa.dma_copy(dst=out.ap(pattern=[[n, 1], [1, n]], offset=0), src=i)
        return out
    return nki.jit(kernel)(np.asarray(values, np.float32))


def test_float_to_int_in_range_truncates():
    """The docs give no rounding for fractions; the simulator truncates toward zero (the compiler's
    casts do not depend on it: tests/lowering/test_casts.py)."""
    got = _to_int([2.7, -2.7, 0.5, -0.5, 2 ** 31 - 128, -(2 ** 31), 16777217.0])
    np.testing.assert_array_equal(got, [2, -2, 0, 0, 2 ** 31 - 128, -(2 ** 31), 16777216])
    np.testing.assert_array_equal(_to_int([255.0, 0.0, 3.9], nl.uint8), [255, 0, 3])


@covers("float-int-conversion")
@pytest.mark.parametrize("value,dtype,via_dma", [
    (float("nan"), nl.int32, False), (float("inf"), nl.int32, False), (float("-inf"), nl.int32, True),
    (2.0 ** 31, nl.int32, False), (-1.0, nl.uint8, False), (300.0, nl.int8, True), (255.5, nl.uint8, False)])
def test_float_to_int_of_nan_inf_out_of_range_refused(value, dtype, via_dma):
    with pytest.raises(SimulatorError) as info:
        _to_int([1.0, value], dtype, via_dma)
    assert info.value.rule == "float-int-conversion" and "NKI docs:" in str(info.value), str(info.value)


@covers("unary-operand")
def test_unary_operator_operand_is_none_or_zero():
    refused("unary-operand", lambda t: nisa.tensor_scalar(dst=sb(), data=t, op0=nl.abs, operand0=2.0))


@covers("reduce-op-legal")
def test_reduction_operator_must_be_legal():
    refused("reduce-op-legal", lambda t: nisa.tensor_reduce(dst=sb((16, 1)), op=nl.power, data=t, axis=(1,)))


@covers("reduce-axis")
def test_reduce_axis():
    refused("reduce-axis", lambda t: nisa.tensor_reduce(dst=sb((1, F)), op=nl.add, data=t, axis=(0,)))


@covers("activation-func-table")
def test_there_is_no_cos_activation():
    refused("activation-func-table", lambda t: nisa.activation(dst=sb(), op=nl.cos, data=t))


@covers("activation-range")
def test_sin_outside_minus_pi_pi():
    refused("activation-range", lambda t: nisa.activation(dst=sb(), op=nl.sin, data=t, scale=4.0))


def test_sin_inside_its_range_runs():
    def kernel(x):
        t = sb()
        nisa.dma_copy(dst=t, src=x.ap(pattern=[[F, 16], [1, F]], offset=0))
        o = sb()
        nisa.activation(dst=o, op=nl.sin, data=t, scale=math.pi)
        out = nl.ndarray((16 * F,), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out.ap(pattern=[[F, 16], [1, F]], offset=0), src=o)
        return out

    np.testing.assert_allclose(nki.jit(kernel)(X), np.sin(np.pi * X), atol=1e-6)


def test_reciprocal_of_zero_is_outside_its_range():
    refused("activation-range", lambda t: nisa.activation(dst=sb(), op=nl.reciprocal, data=t, scale=0.0))


@covers("activation-reduce-add")
def test_activation_reduce_is_add_only():
    refused("activation-reduce-add", lambda t: nisa.activation(dst=sb(), op=nl.exp, data=t, reduce_op=nl.maximum,
                                                               reduce_res=sb((16, 1))))


@covers("activation-scale-fp32")
def test_activation_scale_tile_is_fp32():
    def body(t):
        s = sb((16, 1), nl.bfloat16)
        nisa.memset(dst=s, value=1.0)
        nisa.activation(dst=sb(), op=nl.exp, data=t, scale=s)

    refused("activation-scale-fp32", body)


@covers("activation-bias")
def test_scalar_bias_needs_v3():
    refused("activation-bias", lambda t: nisa.activation(dst=sb(), op=nl.exp, data=t, bias=1.0), target="trn1")


@covers("activation-reciprocal-bias-v2")
def test_reciprocal_with_bias_on_trn1():
    def body(t):
        b = sb((16, 1))
        nisa.memset(dst=b, value=2.0)
        nisa.activation(dst=sb(), op=nl.reciprocal, data=t, bias=b)

    refused("activation-reciprocal-bias-v2", body, target="trn1")


@covers("transpose-same-dtype")
def test_transpose_keeps_the_dtype():
    refused("transpose-same-dtype", lambda t: nisa.nc_transpose(dst=ps((F, 16), nl.bfloat16), data=t,
                                                                engine=nisa.tensor_engine))


@covers("transpose-shape")
def test_vector_transpose_is_32x32():
    def body(t):
        big = sb((16, 64))
        nisa.memset(dst=big, value=0.0)
        nisa.nc_transpose(dst=sb((64, 16)), data=big, engine=nisa.vector_engine)

    refused("transpose-shape", body)


@covers("matmul-dtype")
def test_matmul_fp32_pairs_with_fp32():
    def body(t):
        m = sb((16, F), nl.bfloat16)
        nisa.memset(dst=m, value=1.0)
        nisa.nc_matmul(dst=ps((F, F)), stationary=t, moving=m)

    refused("matmul-dtype", body)


@covers("matmul-shape")
def test_matmul_contraction_must_match():
    refused("matmul-shape", lambda t: nisa.nc_matmul(dst=ps((F, F)), stationary=t, moving=t[0:8, 0:F]))


@covers("matmul-first-overwrite")
def test_first_matmul_must_not_accumulate():
    refused("matmul-first-overwrite", lambda t: nisa.nc_matmul(dst=ps((F, F)), stationary=t, moving=t,
                                                               accumulate=True))


@covers("matmul-accumulate-nonmatmul")
def test_no_accumulation_onto_memset_psum():
    def body(t):
        acc = ps((F, F))
        nisa.memset(dst=acc, value=0.0)
        nisa.nc_matmul(dst=acc, stationary=t, moving=t, accumulate=True)

    refused("matmul-accumulate-nonmatmul", body)


@covers("memory")
def test_matmul_reads_sbuf():
    def body(t):
        p = ps()
        nisa.tensor_copy(dst=p, src=t)
        nisa.nc_matmul(dst=ps((F, F)), stationary=p, moving=t)

    refused("memory", body)


@covers("gpsimd-no-psum")
def test_gpsimd_never_touches_psum():
    refused("gpsimd-no-psum", lambda t: nisa.memset(dst=ps(), value=0.0, engine=nisa.gpsimd_engine))


@covers("psum-inputs")
def test_tensor_tensor_inputs_not_both_psum():
    def body(t):
        a, b = ps(), ps()
        nisa.tensor_copy(dst=a, src=t)
        nisa.tensor_copy(dst=b, src=t)
        nisa.tensor_tensor(dst=sb(), data1=a, data2=b, op=nl.add)

    refused("psum-inputs", body)


@covers("predicate-dtype")
def test_predicate_is_unsigned_integer():
    refused("predicate-dtype", lambda t: nisa.tensor_copy_predicated(dst=sb(), src=t, predicate=t))


@covers("memset-literal-type")
def test_memset_float_into_int_tile():
    refused("memset-literal-type", lambda t: nisa.memset(dst=sb(dtype=nl.int32), value=2.0))


@covers("iota-pattern")
def test_iota_counts_match_the_tile():
    refused("iota-pattern", lambda t: nisa.iota(dst=sb(dtype=nl.int32), pattern=[[1, F + 1]], offset=0))


@covers("dma-elements")
def test_dma_element_counts_match():
    def body(t, x):
        nisa.dma_copy(dst=sb(), src=x.ap(pattern=[[F, 8], [1, F]], offset=0))

    refused("dma-elements", body, X, X)


@covers("indirect-dma")
def test_indirect_offsets_live_in_sbuf():
    def body(t, x):
        idx = ps((16, 1), nl.int32)
        nisa.dma_copy(dst=sb(), src=x.ap(pattern=[[F, 16], [1, F]], offset=0, vector_offset=idx,
                                         indirect_dim=0))

    refused("indirect-dma", body, X, X.reshape(16, F))


@covers("indirect-dma-row-stride")
def test_indirect_row_stride_comes_from_the_base_shape():
    def body(t, x):
        idx = sb((16, 1), nl.int32)
        nisa.iota(dst=idx, pattern=[[0, 1]], offset=0, channel_multiplier=1)
        nisa.dma_copy(dst=sb(), src=x.ap(pattern=[[F, 16], [1, F]], offset=0, vector_offset=idx,
                                         indirect_dim=0))

    refused("indirect-dma-row-stride", body, X, X)  # flat base: the hardware's row stride is 1


@covers("int-fp32-exact")
def test_integer_compare_above_2_24_on_vector_engine():
    def body(t, big):
        a = sb((1, 2), nl.int32)
        nisa.dma_copy(dst=a, src=big.ap(pattern=[[2, 1], [1, 2]], offset=0))
        nisa.tensor_tensor(dst=sb((1, 2), nl.int32), data1=a, data2=a, op=nl.equal, engine=nisa.vector_engine)

    refused("int-fp32-exact", body, X, np.array([2 ** 24 + 1, 3], np.int32))


def test_integer_compare_with_a_small_value_is_exact_in_fp32():
    """Rounding is monotonic: a large integer against a value below 2^24 compares correctly."""
    big = np.array([2 ** 31 - 1, -2 ** 31, 2 ** 24 + 1, 5], np.int32)

    def kernel(x):
        a = sb((1, 4), nl.int32)
        nisa.dma_copy(dst=a, src=x.ap(pattern=[[4, 1], [1, 4]], offset=0))
        r = sb((1, 4), nl.float32)
        nisa.tensor_scalar(dst=r, data=a, op0=nl.less, operand0=0.0)
        out = nl.ndarray((4,), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out.ap(pattern=[[4, 1], [1, 4]], offset=0), src=r)
        return out

    np.testing.assert_array_equal(nki.jit(kernel)(big), [0.0, 1.0, 0.0, 0.0])


def _int_kernel(op, dtype, n: int):
    def kernel(x, y):
        a, b = sb((1, n), dtype), sb((1, n), dtype)
        nisa.dma_copy(dst=a, src=x.ap(pattern=[[n, 1], [1, n]], offset=0))
        nisa.dma_copy(dst=b, src=y.ap(pattern=[[n, 1], [1, n]], offset=0))
        o = sb((1, n), dtype)
        nisa.tensor_tensor(dst=o, data1=a, data2=b, op=op)  # all-int32/uint32: GpSimd by default
        out = nl.ndarray((n,), dtype=dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out.ap(pattern=[[n, 1], [1, n]], offset=0), src=o)
        return out
    return kernel


def test_gpsimd_int32_arithmetic_is_native_and_exact():
    """Exact 32-bit results (above 2^24, where fp32 would round), int32 and uint32."""
    a = np.array([2 ** 30 - 1, 2 ** 24 + 1, -7, -(2 ** 31)], np.int32)
    got = nki.jit(_int_kernel(nl.add, nl.int32, 4))(a, np.array([2 ** 30, 2, 5, 0], np.int32))
    np.testing.assert_array_equal(got, [2 ** 31 - 1, 2 ** 24 + 3, -2, -(2 ** 31)])
    u = np.array([65535, 2 ** 16 + 1, 3, 0], np.uint32)
    got = nki.jit(_int_kernel(nl.multiply, nl.uint32, 4))(u, np.array([65535, 2 ** 15 - 1, 7, 9], np.uint32))
    np.testing.assert_array_equal(got, u.astype(np.int64) * [65535, 2 ** 15 - 1, 7, 9])


@covers("int32-overflow")
@pytest.mark.parametrize("op,dtype,x,y", [
    (nl.add, nl.int32, 2 ** 31 - 1, 1), (nl.multiply, nl.int32, 65536, 32768),
    (nl.subtract, nl.int32, -(2 ** 31), 1), (nl.multiply, nl.uint32, 65536, 65536)])
def test_gpsimd_integer_overflow_is_refused(op, dtype, x, y):
    """No wrap-around is documented: a result leaving 32 bits is refused, not wrapped."""
    npd = np.int32 if dtype == nl.int32 else np.uint32
    with pytest.raises(SimulatorError) as info:
        nki.jit(_int_kernel(op, dtype, 2))(np.array([x, 1], npd), np.array([y, 1], npd))
    assert info.value.rule == "int32-overflow" and "NKI docs:" in str(info.value), str(info.value)


def test_kernel_module_target_wins_over_config():
    """A generated module records PLATFORM_TARGET; the simulator checks that target's rules."""
    src = ("from neuron_inductor.runtime.nki import nki, nl, nisa\nPLATFORM_TARGET = 'trn1'\n\n"
           "@nki.jit\ndef k(x):\n    t = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)\n"
           "    nisa.dma_copy(dst=t, src=x.ap(pattern=[[8, 16], [1, 8]], offset=0))\n"
           "    nisa.tensor_copy(dst=t, src=t, engine=nisa.scalar_engine)\n")
    ns: dict = {}
    with config.patch(target="trn2", runtime="simulator"):
        exec(compile(src, "<kernels>", "exec"), ns)  # noqa: S102 - our own kernel text
        with pytest.raises(SimulatorError) as info:
            ns["k"](X)
    assert info.value.rule == "tensor-copy-scalar-v2"


@covers("scan-operator")
def test_scan_operators_are_binary_arithmetic():
    ones = lambda: sb()  # noqa: E731
    refused("scan-operator", lambda t: nisa.tensor_tensor_scan(dst=sb(), data0=ones(), data1=t, initial=0.0,
                                                               op0=nl.multiply, op1=nl.reciprocal))
    refused("scan-operator", lambda t: nisa.tensor_tensor_scan(dst=sb(), data0=ones(), data1=t,
                                                               initial=sb(), op0=nl.multiply, op1=nl.add))


@covers("gather-dtype")
def test_n_gather_indices_are_uint32_in_range():
    def body(t, dtype=nl.int32, top=F):
        idx = sb(dtype=dtype)
        nisa.iota(dst=idx, pattern=[[1, F]], offset=top - F)
        nisa.nc_n_gather(dst=sb(), data=t, indices=idx)

    refused("gather-dtype", body)
    refused("gather-dtype", lambda t: body(t, nl.uint32, F + 1))  # an index past the free size


def test_every_rule_has_a_refusal():
    assert set(RULES) - STATIC_ONLY == set(RUNTIME_RULES)
