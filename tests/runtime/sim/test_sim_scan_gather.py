"""tensor_tensor_scan and nc_n_gather in the simulator follow their docstrings' pseudo-code."""
from __future__ import annotations

import numpy as np
import pytest

from _sim_helpers import BF16, run_tiles
from neuron_inductor.runtime.sim import nl, nisa

X = np.random.default_rng(0).standard_normal((16, 40)).astype(np.float32)


def test_scan_recurrence_with_scalar_and_tile_initial():
    ones = np.ones_like(X)

    def body(o, a, b):
        nisa.tensor_tensor_scan(dst=o, data0=a, data1=b, initial=2.0, op0=nl.multiply, op1=nl.add)
    got = run_tiles(body, [ones, X], X.shape)
    np.testing.assert_allclose(got, 2.0 + np.cumsum(X, axis=1, dtype=np.float32), rtol=1e-6, atol=1e-5)

    def prod(o, a, b):
        init = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=init, src=b[0:16, 0:1])
        # r[i] = x[i] * r[i-1] + 0, from initial x[:, 0]: x0 * cumprod(x)
        nisa.tensor_tensor_scan(dst=o, data0=b, data1=a, initial=init, op0=nl.multiply, op1=nl.add)
    x = (1 + 0.01 * X)
    got = run_tiles(prod, [np.zeros_like(X), x], X.shape)
    np.testing.assert_allclose(got, x[:, :1] * np.cumprod(x, axis=1), rtol=1e-5)


def test_scan_reverse_operands():
    """reverse1: data1 is the lhs of op1, so op1=subtract gives r[i] = x[i] - r[i-1]."""
    def body(o, a, b):
        nisa.tensor_tensor_scan(dst=o, data0=a, data1=b, initial=0.0, op0=nl.multiply, op1=nl.subtract,
                                reverse1=True)
    got = run_tiles(body, [np.ones_like(X), X], X.shape)
    want = np.zeros_like(X)
    prev = np.zeros(16, np.float32)
    for i in range(X.shape[1]):
        prev = X[:, i] - prev
        want[:, i] = prev
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_scan_carries_the_dst_dtype_value():
    """The recurrence reads result[:, i-1] back from the output: a bf16 dst rounds the carry."""
    x = np.full((16, 300), 1.0 / 3, np.float32)

    def body(o, a, b):
        nisa.tensor_tensor_scan(dst=o, data0=a, data1=b, initial=0.0, op0=nl.multiply, op1=nl.add)
    got = run_tiles(body, [np.ones_like(x), x], x.shape, out_dtype=BF16).astype(np.float32)
    exact = np.cumsum(x, axis=1)
    assert np.abs(got - exact).max() > 0.1  # bf16 stalls: 1/3 is below half an ulp of the sum


@pytest.mark.parametrize("dtype", [np.float32, np.int32], ids=str)
def test_n_gather_reverses_with_an_iota_index(dtype):
    x = (X * 1000).astype(dtype)

    def body(o, a):
        idx = nl.ndarray((16, 40), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.iota(dst=idx, pattern=[[-1, 40]], offset=39)
        nisa.nc_n_gather(dst=o, data=a, indices=idx)
    got = run_tiles(body, [x], x.shape, out_dtype=dtype)
    np.testing.assert_array_equal(got, x[:, ::-1])
