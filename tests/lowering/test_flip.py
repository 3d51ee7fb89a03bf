"""flip (lowering/flip.py) against eager, forward and backward, with no fallback.

The reversal is an on-chip ``nc_n_gather``; ragged chunks (``free_chunk`` smaller than the axis)
are loaded right-aligned, so the same index tile reverses them.
"""
from __future__ import annotations

import pytest
import torch

from _ops import check_cases, randn


CASES = [((3, 300), -1), ((3, 300), 0), ((130, 7), 0), ((130, 7), -1), ((2, 129, 5), 1), ((1,), 0)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_flip_forward_and_backward(dtype):
    for shape, dim in CASES:
        check_cases(lambda x, d=dim: x.flip(d) * 2, [(randn(shape, dtype),)], grad=True)


def test_flip_ragged_chunks_and_int64_words():
    """free_chunk=64 over an axis of 300: four full chunks and a ragged one of 44; int64 values
    beyond 32 bits keep both words."""
    g = torch.Generator().manual_seed(0)
    big = torch.randint(-2**40, 2**40, (130, 300), generator=g)
    check_cases(lambda x, i: (x.flip(-1), x.flip(0), i.flip(-1), i.flip(0)), [(randn((130, 300)), big)],
                grad=True, free_chunk=64)


def test_reverse_cumsum_pattern():
    """The backward of cumsum is flip(cumsum(flip(g))): all three lowered."""
    check_cases(lambda x: x.flip(1).cumsum(1).flip(1), [(randn((3, 300)),)], grad=True, atol=1e-4)


def test_flip_of_several_dims():
    """One dim reversed on chip, the others walked backwards as outer loops (also across the
    128-row tiles: every row dim of the last case is flipped)."""
    g = torch.Generator().manual_seed(0)
    big = torch.randint(-2**40, 2**40, (3, 5, 7), generator=g)
    check_cases(lambda x, y, i: (x.flip(0, 1), x.flip(0, 2), y.flip(0, 1, 2), i.flip(0, 2)),
                [(randn((130, 7, 5)), randn((2, 3, 300)), big)], grad=True, free_chunk=64)


def test_flip_of_size_one_dims_is_a_copy():
    check_cases(lambda x: x.flip(0, 2) + 1, [(randn((1, 5, 1)),)])
