"""Integer right shift by a constant (lowering/shifts.py): torch's arithmetic shift on int32 and
narrower types, large and negative values included, with no fallback."""
from __future__ import annotations

import torch

from _ops import check_cases


def test_right_shift_arithmetic_on_negative_and_extreme_values():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-(1 << 31), (1 << 31) - 1, (300, 129), generator=g, dtype=torch.int32)
    x[0, :4] = torch.tensor([-(1 << 31), (1 << 31) - 1, -1, 0], dtype=torch.int32)
    i16 = torch.randint(-(1 << 15), (1 << 15) - 1, (130, 7), generator=g).to(torch.int16)
    check_cases(lambda x: (x >> 1, x >> 16, x >> 31, (x >> 3) & 0x7FFF, x >> 0), [(x,), (i16,)])


def test_right_shift_of_int64_word_pairs_every_distance():
    """int64 ``>>`` was a declared fallback; the low word now takes the high word's bits."""
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-(1 << 62), (1 << 62), (300, 5), generator=g, dtype=torch.int64)
    x[0] = torch.tensor([-(1 << 63), (1 << 63) - 1, -1, 0, 1 << 40])
    check_cases(lambda x: (x >> 1, x >> 13, x >> 31, x >> 32, x >> 33, x >> 63, x >> 0), [(x,)])
