"""The Llama-7B-shaped decoder layer (benchmarks/decoder_layer.py, default shape) against its modelled
targets: traced as it runs, lowered, never executed, priced by the deterministic cost model (no
timing). MFU >= 40% is the performance issue's target; the traffic, kernel-count and descriptor
bounds are the figures reached (guards against regressions: the issue's <= 4x traffic is not yet
met — the sum of the kernels' own minima is 4.4x the layer's)."""
from __future__ import annotations

import importlib.util
import os

import pytest

from neuron_inductor.config import get_config
from neuron_inductor.costmodel import estimate_program
from neuron_inductor.costmodel.report import step_figures
from neuron_inductor.target import get_target

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "decoder_layer.py")


@pytest.fixture(scope="module")
def layer():
    import sys
    sys.path.insert(0, os.path.dirname(BENCH))  # the script imports its sibling _models
    try:
        spec = importlib.util.spec_from_file_location("decoder_layer", BENCH)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        model, x = mod.build_layer(4096, 32, 11008, 1, 2048)
        cfg = get_config().replace(target="trn2", cache=False, verify_ir=False)
        lowered = mod.capture_programs(model, x, cfg)
    finally:
        sys.path.remove(os.path.dirname(BENCH))
    target = get_target("trn2")
    pc = estimate_program([k for _, lg in lowered for k in lg.program.kernels], target)
    figs = step_figures(pc, mod.model_flops(2048, 2048, 4096, 32, 11008),
                        mod.minimum_hbm_bytes(model, x), target.peak_bf16_flops, {})
    return pc, figs


def test_step_targets(layer):
    pc, figs = layer
    assert figs["mfu"] >= 40.0          # 66.6%; was 12.5% on meta tensors, 50.8% traced as it runs
    assert figs["traffic"] <= 5.1       # 5.05x the layer's minimum; was 5.7x, 8.7x before that
    assert figs["kernels"] <= 26        # was 35
    # 43%; was 32%: the K = 11008 GEMMs' 6-tile M blocks (3 passes over W, not 4) leave PSUM banks
    # for one 512-column rhs tile per k step (1 KiB rows), not two (2 KiB)
    assert pc.small_dma_share <= 0.45


def test_no_kernel_dominates_the_step(layer):
    # the issue: no kernel spends more than 10% of the step in a transposed elementwise pass; the
    # slowest kernel of all (a fused rotary pass, 128-byte rows) is at 8%
    pc, _ = layer
    assert max(k.seconds for k in pc.kernels) <= 0.10 * pc.seconds
