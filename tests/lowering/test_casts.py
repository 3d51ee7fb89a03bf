"""Float -> integer casts equal eager CPU for every input (docs/numerics.md): truncation toward zero
in range, INT_MIN (int32; wrapped for int8/int16/uint8) or INT64_MIN (int64) for NaN, +-Inf and
out-of-range values; exact int64 values up to 2**63. The NKI docs leave the hardware's rounding of
fractions unsaid, so the result must not depend on it: the same kernels run on a simulator whose
conversion rounds to nearest even instead of truncating.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from _ops import check_cases

from neuron_inductor.runtime.sim import dtypes as sim_dtypes

SPECIAL = [float("nan"), float("inf"), float("-inf"), 3e9, -3e9, 2.7, -2.7, 2.5, -2.5, 0.5, -0.5, -0.0,
           300.0, -1.0, 1e20, -1e20, 2147483520.0, -2147483648.0, 2147483648.0, 98304.0, 40000.0,
           -40000.0, 16777217.0, 8388607.5, -8388607.5, 9.2e18, 9.3e18, -9.2e18, 4294967296.0 * 3.5,
           -4294967296.0 * 1.25, 6442450944.0, 2.0 ** 62 + 2.0 ** 40]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]


def _x(dtype):
    x = torch.tensor(SPECIAL * 9, dtype=torch.float32)[:260]
    x[len(SPECIAL) * 4:] = torch.randn(260 - len(SPECIAL) * 4, generator=torch.Generator().manual_seed(0)) * 1e3
    return x.reshape(130, 2).to(dtype)


def _casts(x):
    return tuple(x.to(d) for d in INTS)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_float_to_int_equals_eager_for_every_input(dtype):
    check_cases(_casts, [(_x(dtype),)])


def test_float_to_int_does_not_depend_on_the_hardware_rounding(monkeypatch):
    """A conversion that rounds fractions to nearest even (and never truncates) gives the same."""
    cast = sim_dtypes.cast_to

    def rne(values, dtype):
        v = np.asarray(values)
        if v.dtype.kind == "f" and not sim_dtypes.is_float(dtype):
            v = np.rint(v.astype(np.float64))
        return cast(v, dtype)

    monkeypatch.setattr(sim_dtypes, "cast_to", rne)
    check_cases(_casts, [(_x(torch.float32),)])
