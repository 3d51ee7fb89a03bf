"""cumsum / cumprod (lowering/scan.py) against eager, forward and backward, with no fallback.

Shapes are ragged and span several 128-row tiles; an axis longer than ``free_chunk`` is scanned in
chunks carried through ``initial`` (a small ``free_chunk`` forces several chunks on small inputs).
"""
from __future__ import annotations

import pytest
import torch

from _ops import check_cases, randn

from neuron_inductor import stats
from neuron_inductor.lowering.registry import op_kind

aten = torch.ops.aten

CASES = [((3, 300), -1), ((3, 300), 0), ((130, 7), 0), ((130, 7), -1), ((2, 129, 5), 1), ((1,), 0)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cumsum_forward_and_backward(dtype):
    for shape, dim in CASES:
        check_cases(lambda x, d=dim: x.cumsum(d), [(randn(shape, dtype),)], grad=True, atol=1e-4)


def test_cumsum_chunked_axis_carries_between_chunks():
    """free_chunk=64: an axis of 300 is 5 chunks (the last ragged) in a sequential loop."""
    check_cases(lambda x: (x.cumsum(-1), x.cumsum(0)), [(randn((130, 300)),)], grad=True, atol=1e-4,
                free_chunk=64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cumprod_forward_and_backward(dtype):
    """Values near 1 keep products finite; the backward's cumprod and flips are lowered too (its
    max.dim / scatter / gather may still be declared fallbacks: counted, and correct)."""
    for shape, dim in CASES:
        x = (1 + 0.05 * randn(shape)).to(dtype)
        check_cases(lambda x, d=dim: x.cumprod(d), [(x,)], grad=True, atol=1e-4,
                    fallback="silent", _allow_fallback=True)
        assert not any("cumprod" in op or "flip" in op for op in stats.fallback_ops()), dict(stats.fallback_ops())


def test_cumprod_forward_has_no_fallback():
    check_cases(lambda x: x.cumprod(-1) * 2, [(1 + 0.05 * randn((3, 300)),)], free_chunk=128)


def test_bool_and_narrow_int_cumsum_are_exact():
    """torch promotes integer sums to int64; bool/uint8/int8/int16 partial sums stay below 2^24."""
    g = torch.Generator().manual_seed(0)
    mask = torch.rand(3, 300, generator=g) < 0.7
    i8 = torch.randint(-128, 128, (130, 7), generator=g, dtype=torch.int8)
    i16 = torch.randint(-2**15, 2**15, (2, 300), generator=g, dtype=torch.int16)
    got = check_cases(lambda m, a, b: (m.cumsum(-1), m.cumsum(0), a.cumsum(0), b.cumsum(-1), m.cumprod(-1)),
                      [(mask, i8, i16)])
    assert got[0].dtype == torch.int64 and got[2].min() < 0  # negative sums keep their sign word


def test_packed_sequence_ids_from_position_ids():
    """transformers' packed-document numbering: ``(diff(position_ids) != 1).cumsum(-1)``."""
    pos = torch.cat([torch.arange(n) for n in (5, 130, 1, 120)]).unsqueeze(0)

    def doc_ids(p):
        first = p[:, :1] - 1
        return (torch.diff(p, prepend=first, dim=-1) != 1).cumsum(-1)

    got = check_cases(doc_ids, [(pos,)])
    assert got[0][0, -1].item() == 3


def test_int32_and_int64_cumsum_are_exact():
    """Values near the int32/int64 limits, negative ones, wrap-around past 2^63 as torch's int64
    does; chunked (free_chunk is capped at 512 for these) and across 128-row tiles."""
    g = torch.Generator().manual_seed(0)
    big = torch.randint(-2**62, 2**62, (130, 7), generator=g)
    lim = torch.tensor([[2**63 - 1, 1, 2**63 - 1, -2**63, -1, 5] * 50])
    i32 = torch.randint(-2**31, 2**31, (3, 1100), generator=g, dtype=torch.int32)
    mask = (torch.rand(2, 300, generator=g) < 0.8).long()  # HF: attention_mask.long().cumsum(-1) - 1
    check_cases(lambda a, b, c, m: (a.cumsum(0), a.cumsum(-1), b.cumsum(-1), c.cumsum(-1), c.cumsum(0),
                                    m.cumsum(-1) - 1, c.cumsum(-1, dtype=torch.int32)),
                [(big, lim, i32, mask)])


def test_integer_cumprod_is_a_declared_fallback():
    """Integer products leave fp32's exact range: counted fallback, correct result."""
    x = torch.tensor([[3, -7, 11, 2**20]], dtype=torch.int64)
    check_cases(lambda t: t.cumprod(-1), [(x,)], fallback="silent", _allow_fallback=True)
    assert stats.fallback_ops().get("aten.cumprod.default") == 1


def test_cumsum_is_a_kernel_listed_by_the_cli(capsys):
    """``neuron-inductor ops`` lists the scan kernels (and flip, repeat) and no longer as decompositions."""
    import json

    from neuron_inductor.cli import main
    assert op_kind(aten.cumsum.default) == op_kind(aten.cumprod.default) == "kernel"
    assert main(["ops", "--json"]) == 0
    ops = json.loads(capsys.readouterr().out)
    assert {"cumsum", "cumprod", "flip", "repeat"} <= set(ops["kernels"])
    assert "cumsum" not in ops["decomposed first"]


def test_views_dtypes_and_empty_tensors():
    """A transposed (strided) input, a dtype= cast of an integer input, fp16, and empty tensors."""
    x = randn((130, 300))
    i = torch.randint(-100, 100, (3, 300), dtype=torch.int16)
    check_cases(lambda x, i, h, e: (x.t().cumsum(-1), x[:, 1::3].cumsum(0), i.cumsum(-1, dtype=torch.float32),
                                    h.cumsum(0), e.cumsum(0), e.cumsum(1), x.cumsum(1)[:0]),
                [(x, i, randn((130, 7), torch.float16), torch.zeros(0, 5))], grad=True, atol=1e-4)
