"""Constant float64 0-d operands of float32/bf16 ops (``x * np.sqrt(d_model)``, as ctrl's embedding
scale does) compile without a fallback and give eager's numbers bit for bit, forward and backward;
float64 tensor math and float64 inputs stay declared fallbacks."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from neuron_inductor import stats
from neuron_inductor.graph.wide_scalars import fold_wide_scalar_operands  # noqa: F401 - under test

_STRICT = {"fallback": "error", "cache": False}


def _check_exact(fn, x: torch.Tensor) -> None:
    torch._dynamo.reset()
    xe = x.detach().clone().requires_grad_(True)
    xc = x.detach().clone().requires_grad_(True)
    expected = fn(xe)
    got = torch.compile(fn, backend="neuron", options=_STRICT)(xc)
    assert got.dtype == expected.dtype
    assert torch.equal(got, expected)
    g = torch.randn_like(expected)
    expected.backward(g)
    got.backward(g)
    assert torch.equal(xc.grad, xe.grad)


def _sqrt_of_tensor(x):
    return x * torch.tensor(8.0, dtype=torch.float64).sqrt()


def _numpy_sqrt(x):
    return x * np.sqrt(64)


def _inplace_embed_scale(x):
    y = x + 0
    y *= np.sqrt(48.0)  # what ctrl does to inputs_embeds
    return y


def _scalar_first(x):
    return torch.tensor(3.0, dtype=torch.float64).sqrt() * x + torch.tensor(0.1, dtype=torch.float64)


def _sub_and_mul(x):
    s = torch.tensor(7.0, dtype=torch.float64).sqrt()
    return (x - s.exp()) * s.reciprocal()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fn", [_sqrt_of_tensor, _numpy_sqrt, _inplace_embed_scale])
def test_constant_double_scalar_folds_exactly(fn, dtype):
    _check_exact(fn, torch.randn(260, 33).to(dtype))


@pytest.mark.parametrize("fn", [_scalar_first, _sub_and_mul])
def test_constant_double_scalar_chains_fold_exactly(fn):
    """Several ops per kernel: float32 only, since a fused bf16 chain keeps float32 intermediates
    (with Python scalars just the same), which eager rounds to bf16 between ops."""
    _check_exact(fn, torch.randn(260, 33))


def test_many_constant_chains_in_one_graph_all_fold():
    """Each chain is folded on its own: a graph with dozens of them (one per layer) has no fallback."""
    def fn(x):
        for i in range(40):
            x = x * torch.tensor(float(i + 2), dtype=torch.float64).sqrt()
        return x
    _check_exact(fn, torch.randn(130, 7) * 1e-20)


def test_constant_double_divisor_folds():
    """``x / s`` folds too; the division lowers as ``x * (1 / s)`` (there is no divide ALU op), which
    is within an ulp of eager's true division for any scalar divisor, double or Python float."""
    def fn(x):
        return x / torch.tensor(7.0, dtype=torch.float64).sqrt()
    torch._dynamo.reset()
    x = torch.randn(260, 33)
    got = torch.compile(fn, backend="neuron", options=_STRICT)(x)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, fn(x), rtol=2e-7, atol=0)


def test_double_tensor_math_stays_a_declared_fallback():
    """A float64 tensor with elements has no Trainium type: a reported host op, not a fold."""
    def fn(x):
        return x * torch.tensor([2.0, 3.0], dtype=torch.float64).sqrt()
    torch._dynamo.reset()
    stats.reset("fallback_ops")
    x = torch.randn(4, 2)
    got = torch.compile(fn, backend="neuron", options={"cache": False})(x)
    assert torch.equal(got, fn(x))
    assert got.dtype == torch.float64
    assert stats.fallback_ops()


def test_double_scalar_input_is_not_folded():
    """A float64 0-d graph input is not a constant: it stays a declared fallback (right numbers)."""
    def fn(x, s):
        return x * s.sqrt()
    torch._dynamo.reset()
    stats.reset("fallback_ops")
    x, s = torch.randn(4, 3), torch.tensor(5.0, dtype=torch.float64)
    got = torch.compile(fn, backend="neuron", options={"cache": False})(x, s)
    assert torch.equal(got, fn(x, s))
    assert stats.fallback_ops()
