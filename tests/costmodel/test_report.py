"""The per-kernel report the decoder-layer benchmark prints: small-descriptor DMA share, HBM bytes
against each kernel's minimum, source ops, and the step summary with its before -> after column.
Lowered on meta tensors and priced by the deterministic cost model (no timing)."""
from __future__ import annotations

import importlib.util
import os

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from neuron_inductor import pipeline
from neuron_inductor.config import get_config
from neuron_inductor.costmodel import estimate_program
from neuron_inductor.costmodel.report import (format_kernel_report, format_step_summary, source_ops,
                                              step_figures)
from neuron_inductor.graph.passes import run_passes
from neuron_inductor.target import get_target

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "decoder_layer.py")


def priced(fn, shapes, dtype=torch.float32):
    args = [torch.empty(s, dtype=dtype, device="meta") for s in shapes]
    gm = make_fx(lambda *a: (fn(*a),), tracing_mode="fake")(*args)
    lg = pipeline.partition_and_lower(run_passes(gm), get_config().replace(target="trn2", cache=False), "rep")
    return estimate_program(lg.program.kernels, get_target("trn2"))


def test_narrow_rows_are_small_descriptors_wide_rows_are_not():
    # the first 16 fp32 of each 4 KiB row: 64 B contiguous per partition, all in small descriptors
    narrow = priced(lambda a: a[:, :16] * 2.0, [(4096, 1024)])
    assert narrow.small_dma_share == 1.0
    # 4096 fp32 per row = 16 KiB per partition: no small descriptors
    wide = priced(lambda a: a * 2.0, [(256, 4096)])
    assert wide.dma_bytes >= 2 * 256 * 4096 * 4
    assert wide.small_dma_share == 0.0


def test_kernel_minimum_and_provenance():
    pc = priced(lambda a, b: a * b + 1.0, [(256, 512), (256, 512)])
    (k,) = pc.kernels
    assert k.min_hbm_bytes == 3 * 256 * 512 * 4  # two inputs read once, one output written once
    assert k.hbm_bytes >= k.min_hbm_bytes
    assert source_ops(k.provenance) == "mul, add"
    table = format_kernel_report(pc, {k.name: 0})
    assert k.name in table and "mul, add" in table and "0% of DMA bytes" in table


def test_step_summary_prints_before_and_after():
    pc = priced(lambda a: a * 2.0, [(256, 4096)])
    figs = step_figures(pc, useful_flops=1e6, minimum_hbm=pc.hbm_bytes / 2, peak_flops=1e12,
                        findings={pc.kernels[0].name: 0})
    assert figs["traffic"] == 2.0 and figs["kernels"] == 1 and figs["nonconforming"] == 0
    text = format_step_summary(figs, {"ms": 264.0, "mfu": 12.5})
    assert "(was 264.0 ms)" in text and "(was 12.5%)" in text and "engine busy" in text


def test_decoder_layer_traces_attention_to_the_flash_kernels(monkeypatch):
    # real (uninitialised) CPU tensors under the backend's SDPA selection: forward and backward
    # attention are the flash ops, never the math form's bmm/softmax, and nothing executes
    monkeypatch.syspath_prepend(os.path.dirname(BENCH))  # the script imports its sibling _models
    spec = importlib.util.spec_from_file_location("decoder_layer", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model, x = mod.build_layer(hidden=256, heads=2, intermediate=512, batch=1, seq=128)
    cfg = get_config().replace(target="trn2", cache=False, verify_ir=False)
    lowered = mod.capture_programs(model, x, cfg)
    assert [kind for kind, _ in lowered] == ["forward", "backward"]
    ops = {kind: " ".join(source_ops(k.provenance, limit=99) for k in lg.program.kernels)
           for kind, lg in lowered}
    assert "_scaled_dot_product_flash_attention_for_cpu" in ops["forward"]
    assert "_scaled_dot_product_flash_attention_for_cpu_backward" in ops["backward"]
    assert "_softmax" not in ops["forward"] and "bmm" not in ops["forward"]


def test_stored_summary_reports_small_descriptor_share():
    from neuron_inductor.costmodel.summary import format_cost_summary, summarize_program

    pc = priced(lambda a: a[:, :16] * 2.0, [(4096, 1024)])
    cost = summarize_program(pc, "trn2")
    assert cost["kernels"][0]["dma_small_bytes"] == cost["kernels"][0]["dma_bytes"] > 0
    assert "DMA bytes in descriptors < 2 KiB/partition: 100%" in format_cost_summary(cost)


def test_bound_names_the_engine():
    from neuron_inductor.costmodel.report import bound_by

    # a 2048^3 bf16 GEMM keeps TensorE busiest; a wide fp32 scale only moves bytes
    (mm,) = priced(lambda a, b: a @ b, [(2048, 2048), (2048, 2048)], torch.bfloat16).kernels
    (copy,) = priced(lambda a: a * 2.0, [(256, 4096)]).kernels
    assert (mm.bound, bound_by(mm)) == ("compute", "tensor")
    assert (copy.bound, bound_by(copy)) == ("memory", "dma")
