"""Reductions over a middle axis keep the contiguous axis on the free side (plan ``kept_free``).

``x.sum(1)`` of ``[B, S, H]`` used to put the reduced ``S`` on the free axis and the contiguous ``H``
on partitions: every DMA descriptor moved one 4-byte element (mamba's last kernel: 66 of its 72 ms).
Now ``H`` is the free axis, ``B`` the partitions, and ``S`` a sequential loop whose slices accumulate
element-wise; these tests pin the plan and check it against eager on ragged sizes.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from _ops import check_cases, randn

from neuron_inductor.config import Config
from neuron_inductor.graph.passes import run_passes
from neuron_inductor.lowering.fused import emitter as fused  # the module that calls plan_tiles
from neuron_inductor.pipeline import partition_and_lower

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _plans(monkeypatch, fn, *args, **cfg) -> list:
    plans = _spy(monkeypatch)
    partition_and_lower(run_passes(make_fx(fn)(*args)), Config(fallback="error", **cfg))
    return plans


def _mamba_tail(h, g, c):
    """The shape of mamba's last kernel: pointwise work over [B, S, H], summed over S."""
    return ((c[None] * torch.exp(h) * g).sum(1),)


def test_middle_axis_sum_keeps_contiguous_axis_free(monkeypatch):
    (tp,) = _plans(monkeypatch, _mamba_tail, torch.randn(256, 16, 300), torch.randn(256, 16, 300),
                   torch.randn(16, 300))
    assert tp.kept_free and tp.slots and (tp.P, tp.F, tp.seq) == (0, 2, (1,))
    # every load and the store walk the free axis with stride 1 (whole rows per descriptor)
    assert all(st[tp.F] in (0, 1) for st in list(tp.loads.values()) + list(tp.stores.values()))


def test_few_rows_or_short_rows_keep_the_default_plan(monkeypatch):
    plans = _plans(monkeypatch, lambda x, y: (x.sum(1), y.sum(1)), torch.randn(2, 129, 600),
                   torch.randn(256, 64, 8))
    assert [tp.kept_free for tp in plans] == [False, False]


def _spy(monkeypatch) -> list:
    plans, real = [], fused.plan_tiles

    def spy(*a, **k):
        plans.append(real(*a, **k))
        return plans[-1]
    monkeypatch.setattr(fused, "plan_tiles", spy)
    return plans


def test_middle_axis_reductions_match_eager(monkeypatch):
    """Ragged row tiles (200 = 128 + 72) and chunks (333 in chunks of 128), keepdim, a mean, max and
    min, values computed from the reductions, two reduced axes, and the backward."""
    plans = _spy(monkeypatch)
    def fn(x, w, y, z):
        s = x.sum(1)
        m = (x * w).mean(1, keepdim=True) * 2 + 1
        return s, m, x.amax(1), x.amin(1) - w[0], (y * y).sum((1, 2)), z.sum(1) * 3

    cases = [(randn((200, 7, 333)), randn((7, 333), seed=1), randn((40, 3, 5, 64), seed=2),
              randn((40, 70, 48), seed=5)),
             (randn((33, 2, 40)), randn((2, 40), seed=3), randn((33, 1, 2, 32), seed=4),
              randn((33, 1, 33), seed=6))]
    check_cases(fn, cases, grad=True, free_chunk=128)
    kept = [tp for tp in plans if tp.kept_free]
    assert len(kept) >= 3  # (forwards saving masks for backward keep the default)
    # up to 64 rows per element: one slot each, an affine loop; 70 rows: a sequential accumulation
    assert {tp.slots for tp in kept} == {True, False}


def test_mamba_tail_matches_eager(monkeypatch):
    plans = _spy(monkeypatch)
    cases = [(randn((130, 16, 300)), randn((130, 16, 300), seed=1), randn((16, 300), seed=2))]
    check_cases(_mamba_tail, cases, grad=True, free_chunk=128)
    assert any(tp.kept_free for tp in plans)
