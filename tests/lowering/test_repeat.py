"""repeat (lowering/repeat.py) and the GQA head-repetition patterns against eager, forward and
backward, with no fallback."""
from __future__ import annotations

import pytest
import torch

from _ops import check_cases, randn


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_repeat_forward_and_backward(dtype):
    cases = [((3, 300), (2, 3)), ((130, 7), (2, 1, 3)), ((2, 129, 5), (1, 2, 1)), ((1,), (4,))]
    for shape, reps in cases:
        check_cases(lambda x, r=reps: x.repeat(*r), [(randn(shape, dtype),)], grad=True)


def test_repeat_int64_keeps_both_words():
    g = torch.Generator().manual_seed(0)
    check_cases(lambda i: i.repeat(3, 2), [(torch.randint(-2**40, 2**40, (130, 7), generator=g),)])


def test_gqa_head_repetition_patterns():
    """HF repeat_kv (expand + reshape), repeat_interleave on the head dim, and qwen3.5's
    ``position_ids.repeat(3, 1, 1)``."""
    kv = randn((2, 3, 130, 8))

    def repeat_kv(x, n=4):
        b, h, s, d = x.shape
        return x[:, :, None].expand(b, h, n, s, d).reshape(b, h * n, s, d)

    check_cases(lambda x: (repeat_kv(x), x.repeat_interleave(4, dim=1)), [(kv,)], grad=True)
    pos = torch.arange(300).view(1, 1, 300)
    check_cases(lambda p: p.repeat(3, 1, 1) + 1, [(pos,)])
