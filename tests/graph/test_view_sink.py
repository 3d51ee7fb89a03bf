"""An elementwise value read only through reordering views is recomputed at each view: the rotary
backward's ``slice(g * sin)`` halves no longer make ``g * sin`` a kernel of its own whose result
crosses HBM to be read back half by half; a row statistic read through a broadcast ``expand`` is
left alone (recomputing it per element would multiply its work)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from neuron_inductor.config import get_config
from neuron_inductor.graph.passes import run_passes
from neuron_inductor.pipeline import partition_and_lower

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lowering"))
from _ops import check_cases, randn  # noqa: E402

aten = torch.ops.aten


def rotary_backward(g, cos, sin):
    # the gradient of q * cos + rotate_half(q) * sin with respect to q, as AOTAutograd writes it
    t = g * sin
    n = t.shape[-1] // 2
    return g * cos + torch.cat((t[..., n:], -t[..., :n]), -1)


def _gm(fn, shapes):
    return run_passes(make_fx(lambda *a: (fn(*a),), tracing_mode="fake")(*[torch.empty(s) for s in shapes]))


def test_rotary_backward_is_one_kernel():
    gm = _gm(rotary_backward, [(1, 4, 256, 128), (256, 128), (256, 128)])
    # no elementwise value is left whose only readers are slices
    for n in gm.graph.nodes:
        if n.target is aten.mul.Tensor:
            assert any(u.target is not aten.slice.Tensor for u in n.users), n
    lg = partition_and_lower(gm, get_config().replace(cache=False), "rot_bwd")
    assert not lg.fallbacks
    assert len(lg.program.kernels) == 1, [k.name for k in lg.program.kernels]  # was 2: mul, select


def test_broadcast_statistic_is_not_recomputed_per_element():
    def fn(x, s):
        return x / (s * 2.0).expand(x.shape)
    gm = _gm(fn, [(8, 64), (8, 1)])
    (mul,) = [n for n in gm.graph.nodes if n.target is aten.mul.Tensor]
    assert tuple(mul.meta["val"].shape) == (8, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_backward_matches_eager(dtype):
    # head dim 128 and 64, 300 positions (ragged row tiles)
    cases = [(randn((2, 3, 300, 128), dtype, seed=1), randn((300, 128), dtype, seed=2),
              randn((300, 128), dtype, seed=3)),
             (randn((1, 2, 130, 64), dtype, seed=4), randn((130, 64), dtype, seed=5),
              randn((130, 64), dtype, seed=6))]
    check_cases(rotary_backward, cases, grad=True)
