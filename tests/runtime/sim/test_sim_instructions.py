"""Each nisa instruction against a numpy reference (fp32 tight; bf16 storage rounding exact)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from neuron_inductor import config
from neuron_inductor.runtime.sim import nki, nl, nisa
from neuron_inductor.runtime.sim.numerics import erf

from _sim_helpers import BF16, bf16_round, load, run_tiles, store

rng = np.random.default_rng(0)


def rand(*shape, lo=-2.0, hi=2.0, dtype=np.float32):
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def test_erf_matches_math_erf():
    x = np.linspace(-9, 9, 40001)
    ref = np.array([math.erf(v) for v in x])
    assert np.abs(erf(x).astype(np.float64) - ref).max() < 1e-7


def test_dma_roundtrip_and_bf16_cast_on_load():
    x = rand(100, 37)
    out = run_tiles(lambda o, t: nisa.tensor_copy(dst=o, src=t), [x], (100, 37))
    np.testing.assert_array_equal(out, x)

    @nki.jit
    def k(a):
        t = nl.ndarray((100, 37), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a.ap(pattern=[[37, 100], [1, 37]], offset=0))
        return store(t, nl.bfloat16)

    got = k(x.reshape(-1))
    assert got.dtype == BF16
    np.testing.assert_array_equal(got.astype(np.float32).reshape(100, 37), bf16_round(x))


def test_dma_transposing_and_broadcast_patterns():
    x = rand(24, 16)

    @nki.jit
    def k(a):
        t = nl.ndarray((16, 24), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a.ap(pattern=[[1, 16], [16, 24]], offset=0))  # transpose
        b = nl.ndarray((8, 24), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=b, src=a.ap(pattern=[[0, 8], [16, 24]], offset=3))  # column 3, bcast
        return store(t, nl.float32), store(b, nl.float32)

    t, b = k(x.reshape(-1))
    np.testing.assert_array_equal(t.reshape(16, 24), x.T)
    np.testing.assert_array_equal(b.reshape(8, 24), np.broadcast_to(x[:, 3], (8, 24)))


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("accumulate", [False, True, None])
def test_nc_matmul(dtype, accumulate):
    k_, m, n = 96, 70, 130
    s, mv = rand(k_, m, dtype=dtype), rand(k_, n, dtype=dtype)
    ref = s.astype(np.float32).T @ mv.astype(np.float32)

    def body(o, ts, tm):
        acc = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
        # the first matmul into a location overwrites; True accumulates onto a matmul result
        nisa.nc_matmul(dst=acc, stationary=ts, moving=tm, accumulate=False if accumulate else accumulate)
        if accumulate is not False:  # second matmul into the same location accumulates
            nisa.nc_matmul(dst=acc, stationary=ts, moving=tm, accumulate=accumulate)
        nisa.tensor_copy(dst=o, src=acc)

    out = run_tiles(body, [s, mv], (m, n))
    np.testing.assert_allclose(out, ref * (1 if accumulate is False else 2), rtol=1e-5, atol=1e-5)


def test_nc_matmul_accumulates_onto_a_memset_on_trn3():
    """From NeuronCore-v4 a matmul may accumulate onto PSUM a memset initialised (refused on v2/v3:
    tests/runtime/sim/test_sim_spec_refusals.py); the result is the memset value plus the product."""
    s, mv = rand(32, 16), rand(32, 24)

    def body(o, ts, tm):
        acc = nl.ndarray((16, 24), dtype=nl.float32, buffer=nl.psum)
        nisa.memset(dst=acc, value=1.5)
        nisa.nc_matmul(dst=acc, stationary=ts, moving=tm, accumulate=True)
        nisa.tensor_copy(dst=o, src=acc)

    with config.patch(target="trn3"):
        out = run_tiles(body, [s, mv], (16, 24))
    np.testing.assert_allclose(out, s.T @ mv + 1.5, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("engine", ["tensor", "vector"])
def test_nc_transpose(engine):
    p, f = (100, 120) if engine == "tensor" else (20, 32)
    x = rand(p, f)

    def body(o, t):
        if engine == "tensor":
            ps = nl.ndarray((f, p), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_transpose(dst=ps, data=t, engine=nisa.tensor_engine)
            nisa.tensor_copy(dst=o, src=ps)
        else:
            nisa.nc_transpose(dst=o, data=t, engine=nisa.vector_engine)

    np.testing.assert_array_equal(run_tiles(body, [x], (f, p)), x.T)


def _sig(x):
    return 1 / (1 + np.exp(-x))


ACT_REF = {
    "copy": lambda x: x, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "reciprocal": lambda x: 1 / x, "tanh": np.tanh,
    "sigmoid": _sig, "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x.ravel()]
                                              ).reshape(x.shape)),
    "gelu_apprx_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi)
                                                        * (x + 0.044715 * x ** 3))),
    "silu": lambda x: x * _sig(x),
    "erf": lambda x: np.array([math.erf(v) for v in x.ravel()]).reshape(x.shape),
    "abs": np.abs, "sign": np.sign, "square": np.square, "sin": np.sin,
}


@pytest.mark.parametrize("name", sorted(ACT_REF))
def test_activation_functions(name):
    positive = name in ("log", "sqrt", "rsqrt")
    x = rand(32, 40, lo=0.1 if positive else -3.0, hi=3.0)
    out = run_tiles(lambda o, t: nisa.activation(dst=o, op=getattr(nl, name), data=t), [x],
                    (32, 40))
    np.testing.assert_allclose(out, ACT_REF[name](x.astype(np.float64)), rtol=2e-6, atol=1e-6)


def test_activation_scale_bias_tiles_and_reduce():
    x, b, s = rand(50, 64), rand(50, 1), rand(50, 1)
    y = np.exp(x * s + b)

    def body(o, tx, tb, ts):
        r = nl.ndarray((50, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=o[0:50, 0:64], op=nl.exp, data=tx, bias=tb, scale=ts,
                        reduce_op=nl.add, reduce_res=r)
        nisa.tensor_copy(dst=o[0:50, 64:65], src=r)

    out = run_tiles(body, [x, b, s], (50, 65))
    np.testing.assert_allclose(out[:, :64], y, rtol=1e-6)
    np.testing.assert_allclose(out[:, 64], y.sum(1), rtol=1e-5)
    out2 = run_tiles(lambda o, t: nisa.activation(dst=o, op=nl.tanh, data=t, scale=0.5), [x],
                     (50, 64))
    np.testing.assert_allclose(out2, np.tanh(0.5 * x), rtol=1e-6)


BINARY_REF = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply,
    "maximum": np.maximum, "minimum": np.minimum, "power": lambda a, b: np.abs(a) ** b,
    "equal": np.equal, "not_equal": np.not_equal, "greater": np.greater,
    "greater_equal": np.greater_equal, "less": np.less, "less_equal": np.less_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
}


@pytest.mark.parametrize("name", sorted(BINARY_REF))
def test_tensor_tensor(name):
    a, b = rand(40, 33), rand(40, 33)
    a[:, :3] = 0.0
    b[:, 5] = a[:, 5]  # exercise equality
    if name == "power":
        a = np.abs(a) + 0.1
    out = run_tiles(lambda o, x, y: nisa.tensor_tensor(dst=o, data1=x, data2=y,
                                                       op=getattr(nl, name)), [a, b], (40, 33))
    np.testing.assert_allclose(out, BINARY_REF[name](a, b).astype(np.float32), rtol=1e-6)


@pytest.mark.parametrize("name", ["bitwise_and", "bitwise_or", "bitwise_xor"])
def test_tensor_tensor_bitwise_int32(name):
    a = rng.integers(-2**30, 2**30, size=(16, 8), dtype=np.int32)
    b = rng.integers(-2**30, 2**30, size=(16, 8), dtype=np.int32)
    out = run_tiles(lambda o, x, y: nisa.tensor_tensor(dst=o, data1=x, data2=y,
                                                       op=getattr(nl, name)), [a, b], (16, 8),
                    np.int32)
    np.testing.assert_array_equal(out, getattr(np, name)(a, b))


def test_tensor_tensor_bf16_output_rounds():
    a, b = rand(16, 64), rand(16, 64)
    out = run_tiles(lambda o, x, y: nisa.tensor_tensor(dst=o, data1=x, data2=y, op=nl.multiply),
                    [a, b], (16, 64), BF16)
    np.testing.assert_array_equal(out.astype(np.float32), bf16_round(a * b))


def test_tensor_scalar_variants():
    x, c = rand(30, 20), rand(30, 1)
    out = run_tiles(lambda o, t: nisa.tensor_scalar(dst=o, data=t, op0=nl.subtract, operand0=1.5,
                                                    reverse0=True, op1=nl.multiply, operand1=2.0),
                    [x], (30, 20))
    np.testing.assert_allclose(out, (1.5 - x) * 2.0, rtol=1e-6)
    out = run_tiles(lambda o, t, tc: nisa.tensor_scalar(dst=o, data=t, op0=nl.multiply, operand0=tc,
                                                        op1=nl.add, operand1=0.5),
                    [x, c], (30, 20))
    np.testing.assert_allclose(out, x * c + 0.5, rtol=1e-6)
    xi = rng.integers(0, 1000, size=(8, 8), dtype=np.int32)
    out = run_tiles(lambda o, t: nisa.tensor_scalar(dst=o, data=t, op0=nl.bitwise_and,
                                                    operand0=0xF0), [xi], (8, 8), np.int32)
    np.testing.assert_array_equal(out, xi & 0xF0)


@pytest.mark.parametrize("name,ref", [("add", np.sum), ("maximum", np.max), ("minimum", np.min),
                                      ("multiply", np.prod)])
def test_tensor_reduce(name, ref):
    x = rand(20, 6, 10, lo=0.5, hi=1.5)

    @nki.jit
    def k(a):
        t = nl.ndarray((20, 6, 10), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a.ap(pattern=[[60, 20], [10, 6], [1, 10]], offset=0))
        r1 = nl.ndarray((20, 6), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=r1, op=getattr(nl, name), data=t, axis=(2,))
        r2 = nl.ndarray((20, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=r2, op=getattr(nl, name), data=t, axis=(1, 2), negate=True,
                           keepdims=True)
        return store(r1, nl.float32), store(r2, nl.float32)

    r1, r2 = k(x.reshape(-1))
    np.testing.assert_allclose(r1.reshape(20, 6), ref(x, axis=2), rtol=1e-5)
    np.testing.assert_allclose(r2.reshape(20), -ref(x, axis=(1, 2)), rtol=1e-5)


def test_tensor_copy_casts_and_engines():
    x = rand(10, 12) * 100
    out = run_tiles(lambda o, t: nisa.tensor_copy(dst=o, src=t, engine=nisa.scalar_engine), [x],
                    (10, 12), BF16)
    np.testing.assert_array_equal(out.astype(np.float32), bf16_round(x))
    out = run_tiles(lambda o, t: nisa.tensor_copy(dst=o, src=t, engine=nisa.gpsimd_engine), [x],
                    (10, 12), np.int32)
    np.testing.assert_array_equal(out, np.trunc(x).astype(np.int32))


def test_tensor_copy_predicated():
    x, y = rand(10, 12), rand(10, 12)
    pred = (rand(10, 12) > 0).astype(np.uint8)

    def body(o, tx, ty, tp):
        nisa.tensor_copy(dst=o, src=ty)
        nisa.tensor_copy_predicated(dst=o, src=tx, predicate=tp)

    np.testing.assert_array_equal(run_tiles(body, [x, y, pred], (10, 12)),
                                  np.where(pred != 0, x, y))

    def body_rev(o, tx, ty, tp):
        nisa.tensor_copy(dst=o, src=ty)
        nisa.tensor_copy_predicated(dst=o, src=tx, predicate=tp, reverse_pred=True)

    np.testing.assert_array_equal(run_tiles(body_rev, [x, y, pred], (10, 12)),
                                  np.where(pred == 0, x, y))


def test_memset_and_iota():
    out = run_tiles(lambda o: nisa.memset(dst=o, value=-np.inf), [], (4, 5))
    assert np.all(out == -np.inf)
    out = run_tiles(lambda o: nisa.iota(dst=o, pattern=[[3, 7]], offset=5, channel_multiplier=100),
                    [], (6, 7), np.int32)
    np.testing.assert_array_equal(out, 5 + 100 * np.arange(6)[:, None] + 3 * np.arange(7)[None])
    out = run_tiles(lambda o: nisa.iota(dst=o, pattern=[[1, 4]], offset=0, channel_multiplier=4),
                    [], (3, 4), np.float32)
    np.testing.assert_array_equal(out.reshape(-1), np.arange(12, dtype=np.float32))


def test_reciprocal_of_zero_and_exp_overflow_give_inf_without_warnings():
    x = np.array([[0.0, 1.0, -1.0, 100.0]], np.float32)
    with np.errstate(all="raise"):
        out = run_tiles(lambda o, t: nisa.activation(dst=o, op=nl.exp, data=t), [x], (1, 4))
        assert out[0, 3] == np.inf
        out = run_tiles(lambda o, t: nisa.tensor_scalar(dst=o, data=t, op0=nl.reciprocal,
                                                        operand0=0.0), [x], (1, 4))
        assert out[0, 0] == np.inf and out[0, 1] == 1.0 and out[0, 2] == -1.0


def test_unwritten_memory_reads_as_nan():
    def body(o, t):
        scratch = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=o, data1=t, data2=scratch, op=nl.add)

    assert np.isnan(run_tiles(body, [rand(4, 4)], (4, 4))).all()


def test_dma_negative_strides_reverse_rows():
    x = rand(12, 10)

    @nki.jit
    def k(a):
        t = nl.ndarray((12, 10), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a.ap(pattern=[[-10, 12], [-1, 10]], offset=119))
        out = nl.ndarray((120,), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out.ap(pattern=[[-10, 12], [1, 10]], offset=110), src=t)
        return out

    np.testing.assert_array_equal(k(x.reshape(-1)).reshape(12, 10), x[:, ::-1])
