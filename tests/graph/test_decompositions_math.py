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
