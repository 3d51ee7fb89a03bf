"""Flash attention at the Llama-7B shape (benchmarks/attention.py: 32 heads x seq 2048 x head dim 128,
bf16, trn2) against its matmul-FLOP roofline: traced on fake tensors, lowered by the real lowering,
priced by the deterministic cost model (never executed, no timing). The issue's target is 2x of
roofline forward and backward, full and causal; the causal forward is not there yet (its VectorE and
ScalarE are saturated by per-query-tile work and the strided Q/K^T evictions), so its bound is the
figure reached."""
from __future__ import annotations

import importlib.util
import os

import pytest

from neuron_inductor.config import get_config
from neuron_inductor.costmodel import estimate_program
from neuron_inductor.target import get_target

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "attention.py")
SHAPE = (1, 32, 2048, 128)   # batch, heads, seq, head dim
#: modelled time over roofline: full fwd 1.80x (was 2.13x), full bwd 1.45x, causal fwd 2.11x (was
#: 2.48x), causal bwd 1.99x
BOUNDS = {(False, "fwd"): 1.85, (False, "bwd"): 1.5, (True, "fwd"): 2.15, (True, "bwd"): 2.0}


def _bench():
    spec = importlib.util.spec_from_file_location("attention_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_within_bounds_of_roofline(causal):
    mod = _bench()
    target = get_target("trn2")
    cfg = get_config().replace(target="trn2", cache=False)
    fk, bk = mod.lowered_attention(*SHAPE, causal, cfg)
    for name, ks, flops in zip(("fwd", "bwd"), (fk, bk), mod.roofline_flops(*SHAPE, causal)):
        ratio = estimate_program(ks, target).seconds / (flops / target.peak_bf16_flops)
        assert ratio <= BOUNDS[(causal, name)], (causal, name, ratio)
