"""Helpers for simulator tests: run one tile-level body between HBM loads and a store."""
from __future__ import annotations

from typing import Callable

import ml_dtypes
import numpy as np

from neuron_inductor.runtime.sim import nki, nl, nisa

BF16 = np.dtype(ml_dtypes.bfloat16)


def load(x, shape, dtype):
    """SBUF tile of ``shape`` filled from the flat HBM tensor ``x`` (row-major)."""
    t = nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)
    p, f = shape
    nisa.dma_copy(dst=t, src=x.ap(pattern=[[f, p], [1, f]], offset=0))
    return t


def store(t, dtype):
    """A shared_hbm output holding tile ``t`` (row-major)."""
    p, f = t.shape
    out = nl.ndarray((p * f,), dtype=dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out.ap(pattern=[[f, p], [1, f]], offset=0), src=t)
    return out


def run_tiles(body: Callable, inputs: list[np.ndarray], out_shape: tuple[int, int],
              out_dtype=np.float32) -> np.ndarray:
    """Load each 2-D input into an SBUF tile of its dtype, call ``body(out_tile, *in_tiles)``,
    return the output tile as a 2-D numpy array."""
    specs = [(a.shape, a.dtype) for a in inputs]

    def kernel(*params):
        tiles = [load(x, shape, dtype) for x, (shape, dtype) in zip(params, specs)]
        o = nl.ndarray(out_shape, dtype=out_dtype, buffer=nl.sbuf)
        body(o, *tiles)
        return store(o, out_dtype)

    out = nki.jit(kernel)(*[np.ascontiguousarray(a).reshape(-1) for a in inputs])
    return out.reshape(out_shape)


def bf16_round(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.float32).astype(BF16).astype(np.float32)
