"""linalg.solve_triangular compiles to kernels (it was a host fallback: the last one of Qwen3.5's gated
delta rule) and matches eager forward and backward, for every triangle / diagonal / side, batched and
broadcast, with the ignored triangle holding garbage that must not leak in."""
from __future__ import annotations

import pytest
import torch

from neuron_inductor import stats
from neuron_inductor.graph.decompositions_linalg import BLOCK, MAX_N
from tests._compare import check, run_compiled


def _system(batch: tuple, n: int, scale: float = 0.5) -> torch.Tensor:
    """Well conditioned both ways round: a dominant diagonal, modest off-diagonals, and random
    values (not zeros) in the triangle the solve must ignore."""
    return torch.randn(*batch, n, n) * (scale / n ** 0.5) + 2 * torch.eye(n)


def _solve(upper: bool, left: bool, unit: bool):
    def fn(a, b):
        return torch.linalg.solve_triangular(a, b, upper=upper, left=left, unitriangular=unit)
    return fn


@pytest.mark.parametrize("upper", [False, True], ids=["lower", "upper"])
@pytest.mark.parametrize("left", [True, False], ids=["left", "right"])
@pytest.mark.parametrize("unit", [False, True], ids=["diag", "unit"])
def test_solve_matches_eager_forward_and_backward_without_fallback(upper, left, unit):
    torch.manual_seed(0)
    n = 37  # ragged: not a power of two, not a tile multiple
    a = _system((2, 1), n)
    b = torch.randn(3, n, 5) if left else torch.randn(3, 5, n)  # batch broadcasts against a's
    stats.reset()
    check(_solve(upper, left, unit), a, b, grad=True)
    assert not stats.fallback_ops(), dict(stats.fallback_ops())


@pytest.mark.parametrize("upper", [False, True], ids=["lower", "upper"])
def test_system_within_one_block_uses_plain_substitution(upper):
    torch.manual_seed(1)
    n = BLOCK - 7
    check(_solve(upper, True, False), _system((3,), n), torch.randn(3, n, 2), grad=True)
    assert not stats.fallback_ops(), dict(stats.fallback_ops())


def test_gated_delta_rule_shape_with_alike_rows_matches_eager():
    """Qwen3.5's call: [b, h, chunks, 64, 64] unit-lower, rows of N nearly equal (similar keys, beta
    near 1, no decay). The inverse is small but powers of N reach ~1e17, so any Neumann-series /
    doubling inverse cancels to noise in fp32; substitution must not."""
    torch.manual_seed(0)
    n = 64
    alike = torch.ones(n, n) * 0.99 + torch.randn(1, 2, 2, n, n) * 0.01
    b = torch.randn(1, 2, 2, n, 16)
    stats.reset()
    got = check(_solve(False, True, True), alike, b, grad=True, atol=1e-4, rtol=1e-4)
    assert got.abs().max() < 1e3
    assert not stats.fallback_ops(), dict(stats.fallback_ops())


@pytest.mark.parametrize("upper", [False, True], ids=["lower", "upper"])
def test_bf16_matches_the_float32_reference(upper):
    """Eager has no bf16 triangular solve on CPU: the compiled bf16 solve (fp32 inside) must match
    the fp32 solve of the same bf16 values, rounded once."""
    torch.manual_seed(0)
    a = _system((2, 3), 21).bfloat16()
    b = torch.randn(2, 3, 21, 4).bfloat16()
    with pytest.raises(RuntimeError):
        torch.linalg.solve_triangular(a, b, upper=upper)
    stats.reset()
    got = run_compiled(_solve(upper, True, False), a, b)
    assert got.dtype == torch.bfloat16
    want = torch.linalg.solve_triangular(a.float(), b.float(), upper=upper).bfloat16()
    torch.testing.assert_close(got, want, rtol=1.6e-2, atol=1e-2)
    assert not stats.fallback_ops(), dict(stats.fallback_ops())


def test_one_by_one_system_divides_or_copies():
    a, b = torch.tensor([[4.0]]), torch.randn(1, 3)
    check(_solve(False, True, False), a, b, grad=True)
    check(_solve(True, True, True), a, b)


def test_above_the_unroll_bound_stays_a_declared_fallback():
    torch.manual_seed(0)
    n = MAX_N + 1
    a, b = _system((), n), torch.randn(n, 2)
    stats.reset()
    check(_solve(False, True, False), a, b, atol=1e-4, rtol=1e-4)
    assert any("solve_triangular" in op for op in stats.fallback_ops()), dict(stats.fallback_ops())
