"""The Llama-7B-shaped decoder layer (benchmarks/decoder_layer.py, default shape) against its modelled
targets: traced as it runs, lowered, never executed, priced by the deterministic cost model (no
timing). MFU >= 40% and HBM traffic <= 4x the layer's minimum are the performance issue's targets;
the kernel-count and descriptor bounds are the figures reached (guards against regressions)."""
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
    assert figs["mfu"] >= 40.0          # 78.7%; was 12.5% on meta tensors, 50.8% traced as it runs
    # 3.99x the layer's minimum; was 5.05x with the rotary as a fused select (128-byte rows, x read
    # three times), the backward's rotary + cat as three kernels and the K = 11008 / 12288 GEMMs
    # reading their weight 3 times, 4.01x with the RMSNorm weight re-read per row tile in the
    # epilogues of the backward's down / o-projection GEMMs
    assert figs["traffic"] <= 4.0
    assert figs["kernels"] <= 24        # was 26
    # 22%; was 44% (the rotary kernels' 128-byte rows, the deep-K GEMMs' 1 KiB rhs rows)
    assert pc.small_dma_share <= 0.30


def test_no_kernel_dominates_the_step(layer):
    # the issue: no kernel spends more than 10% of the step in a transposed elementwise pass; the
    # slowest kernel of all is a GEMM at 7.5% (the rotary kernels are under 1% each)
    pc, _ = layer
    assert max(k.seconds for k in pc.kernels) <= 0.10 * pc.seconds
