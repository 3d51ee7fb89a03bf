"""cumsum of bool / uint8 tensors is a triangular matmul: exact, with no fallback."""
from __future__ import annotations

import pytest
import torch

import neuron_inductor.compile as nic
from _compare import run_compiled


@pytest.mark.parametrize("shape,dim", [((2, 300), -1), ((3, 5, 7), 1), ((1, 1), 0), ((130, 4), 0)])
def test_bool_cumsum_is_exact_and_lowered(shape, dim):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(*shape, generator=g) < 0.7
    nic.reset_counters()
    got = run_compiled(lambda t: t.cumsum(dim), x, fallback="error")
    assert got.dtype == torch.int64
    torch.testing.assert_close(got, x.cumsum(dim), rtol=0, atol=0)


def test_packed_sequence_ids_from_position_ids():
    """transformers' packed-document numbering: ``(diff(position_ids) != 1).cumsum(-1)``."""
    pos = torch.cat([torch.arange(n) for n in (5, 130, 1, 120)]).unsqueeze(0)

    def doc_ids(p):
        first = p[:, :1] - 1
        return (torch.diff(p, prepend=first, dim=-1) != 1).cumsum(-1)

    got = run_compiled(doc_ids, pos, fallback="error")
    torch.testing.assert_close(got, doc_ids(pos), rtol=0, atol=0)
    assert got[0, -1].item() == 3


def test_float_cumsum_is_not_rewritten():
    """Float prefix sums are not exact as a matmul: they stay a declared fallback."""
    nic.reset_counters()
    x = torch.randn(4, 9)
    torch.testing.assert_close(run_compiled(lambda t: t.cumsum(-1), x), x.cumsum(-1))
    assert nic.fallback_ops["aten.cumsum.default"] == 1
