"""isnan / isinf / isfinite and exp2 / log2 / log10 / pow(scalar, tensor) compile to kernels (they
were host fallbacks), with eager's answers on NaN, ±inf, integers and bf16."""
from __future__ import annotations

import math

import pytest
import torch

from neuron_inductor import stats
from tests._compare import check

SPECIAL = torch.tensor([0.0, -0.0, 1.0, -2.0, math.nan, math.inf, -math.inf, 3.5, 1e38] * 37)


@pytest.mark.parametrize("fn", [torch.isnan, torch.isinf, torch.isfinite, torch.isposinf, torch.isneginf],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64],
                         ids=lambda d: str(d).split(".")[-1])
def test_float_classification_matches_eager_without_fallback(fn, dtype):
    x = SPECIAL.to(dtype) if dtype.is_floating_point else torch.randint(-2**31, 2**31 - 1, (333,)).to(dtype)
    stats.reset()
    got = check(fn, x)
    assert got.dtype == torch.bool
    assert not stats.fallback_ops(), dict(stats.fallback_ops())


@pytest.mark.parametrize("fn", [torch.exp2, lambda t: torch.log2(t.abs() + 0.1),
                                lambda t: torch.log10(t.abs() + 0.1), lambda t: torch.pow(2.5, t),
                                lambda t: torch.pow(1, t)],
                         ids=["exp2", "log2", "log10", "pow_2.5", "pow_1"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_other_bases_match_eager_forward_and_backward(fn, dtype):
    x = (torch.randn(300, 5) * 4).to(dtype)
    stats.reset()
    check(fn, x, grad=True)
    assert not stats.fallback_ops(), dict(stats.fallback_ops())


def test_pow_of_a_negative_or_zero_base_is_not_rewritten_through_log():
    """exp(x * ln(base)) only holds for a positive base; the others keep torch's own path."""
    x = torch.tensor([0.0, 1.0, 2.0, -1.0, 0.5] * 20)
    check(lambda t: torch.pow(0.0, t), x)
    check(lambda t: torch.pow(-2.0, t), x)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=["int32", "int64"])
def test_integer_floor_division_by_a_power_of_two_is_a_shift(dtype):
    """A chunked-attention mask's ``pos // chunk_size``: exact for negative and extreme values."""
    x = torch.randint(-2**31, 2**31 - 1, (300,), dtype=dtype) * (3 if dtype == torch.int64 else 1)
    for fn in (lambda t: t // 8, lambda t: torch.div(t, 1024, rounding_mode="floor"), lambda t: t // 1):
        stats.reset()
        check(fn, x)
        assert not stats.fallback_ops(), dict(stats.fallback_ops())
    stats.reset()
    check(lambda t: t // 6, x)  # other divisors: the declared fallback, eager's answer
    assert stats.fallback_ops()


ROUNDING_EDGES = torch.tensor([0.0, -0.0, 0.3, -0.3, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999997, -0.49999997,
                               1.0, -1.0, 7.999999, -7.999999, 2.0**22 + 0.5, -(2.0**22 + 0.5), 2.0**23 - 1,
                               2.0**23 + 2, -(2.0**23) - 2, 3e9, -3e9, 1e38, math.nan, math.inf, -math.inf])


@pytest.mark.parametrize("fn", [torch.floor, torch.ceil, torch.trunc, torch.round], ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_rounding_matches_eager_exactly_without_fallback(fn, dtype):
    """floor/ceil/trunc/round (a position-dependent attention scale: ``log(1 + floor(pos / n))``)
    compile to kernels, exact on halves, ties, negatives, values past 2**22/2**23, NaN and ±inf."""
    x = torch.cat([ROUNDING_EDGES, torch.randn(300) * 100]).to(dtype)
    stats.reset()
    got = torch.compile(fn, backend="neuron", options={"cache": False})(x)
    assert torch.equal(got.isnan(), fn(x).isnan())
    torch.testing.assert_close(got, fn(x), rtol=0, atol=0, equal_nan=True)
    assert not stats.fallback_ops(), dict(stats.fallback_ops())
    check(lambda t: fn(t * 7.3) * t, (torch.randn(200) * 10).to(dtype), grad=True)
