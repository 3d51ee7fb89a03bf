"""Ops with an operand of zero elements and a result with some: compiled like eager, no kernel ever
takes an empty tensor (the wrapper's ``host.hbm`` refuses one at run time), no fallback."""
from __future__ import annotations

import pytest
import torch

from neuron_inductor.graph.empty import fold_empty_operands  # noqa: F401 - the pass under test


def _check(fn, *args, grad: bool = False):
    torch._dynamo.reset()
    args_e = [a.detach().clone().requires_grad_(grad and a.is_floating_point()) for a in args]
    args_c = [a.detach().clone().requires_grad_(grad and a.is_floating_point()) for a in args]
    expected = fn(*args_e)
    got = torch.compile(fn, backend="neuron", options={"fallback": "error", "cache": False})(*args_c)
    torch.testing.assert_close(got, expected, equal_nan=True, rtol=1e-4, atol=1e-4)
    if grad:
        expected.square().sum().backward()
        got.square().sum().backward()
        for a, b in zip(args_c, args_e):
            if b.grad is not None:
                torch.testing.assert_close(a.grad, b.grad)


def test_slice_scatter_of_zero_width_slice():
    """What a hybrid linear-attention model's conv-state update does at some lengths: the stepped
    slice 2:30:3 of a width-2 axis is empty, so slice_scatter writes nothing."""
    def fn(x, s):
        return torch.slice_scatter(x * 2, s * 3, 2, 2, 30, 3) + 1
    _check(fn, torch.randn(2, 16, 2), torch.randn(2, 16, 0))


def test_cat_with_empty_piece():
    _check(lambda x: torch.cat([x[:, :0] * 2, x + 1, x[:, 5:5]], 1).exp(), torch.randn(130, 7), grad=True)


@pytest.mark.parametrize("op", ["sum", "prod", "mean"])
def test_reduction_over_empty_extent(op):
    _check(lambda x: getattr(x[:0], op)(0) + x[0], torch.randn(3, 5))


def test_matmul_with_empty_contraction():
    _check(lambda a, b: (a[:, :0] @ b[:0]) + a[:, :1], torch.randn(130, 4), torch.randn(4, 9))


def test_index_put_and_index_add_with_no_indices():
    idx = torch.zeros(0, dtype=torch.int64)

    def fn(x, i):
        y = torch.index_put(x * 2, (i,), torch.zeros(0, 4))
        return torch.index_add(y, 0, i, torch.zeros(0, 4)) + 1
    _check(fn, torch.randn(6, 4), idx)


def test_empty_result_still_fine():
    """The other half of the class: an empty result is allocated by the wrapper, no kernel."""
    _check(lambda x: (x[:, 3:3] * 2, x + 1), torch.randn(4, 6))


def test_addmm_with_empty_contraction_folds_to_its_bias():
    """addmm over an empty contraction is its bias, broadcast: folded before lowering (no kernel
    gets an empty tensor, nothing falls back) with eager's answer."""
    from neuron_inductor import stats
    torch._dynamo.reset()
    stats.reset("compile", "fallback_ops")
    fn = lambda b, x, w: torch.addmm(b, x[:, :0], w[:0]) * 2  # noqa: E731
    args = (torch.randn(9), torch.randn(5, 4), torch.randn(4, 9))
    got = torch.compile(fn, backend="neuron", options={"fallback": "silent", "cache": False})(*args)
    torch.testing.assert_close(got, fn(*args))
    assert not stats.fallback_ops(), stats.fallback_ops()
    assert stats.compiled()["graphs_compiled"] == 1


def test_cat_of_empty_and_transposed_piece_keeps_the_consumers_layout():
    """A dynamic KV cache's first update: cat(empty, k.transpose) then a slice of it. The result is
    the transposed piece, but laid out as cat's contiguous result that the slice's strides assume."""
    def fn(x, w):
        k = (x @ w).view(2, 130, 4, 16).transpose(1, 2)
        full = torch.cat([torch.zeros(2, 4, 0, 16), k], dim=-2)
        return full[:, :, -31:, :] * 2, full.sum(-1)
    _check(fn, torch.randn(2, 130, 64), torch.randn(64, 64))
