"""Targets as data: trn3 (NeuronCore-v4) next to trn1/trn2, its numbers, and that it is used.

The values are the public architecture guides' (docs/targets.md); what is tested here is that the
compiler reads them: the configuration accepts every target, the tile planners give trn3 kernels
its larger SBUF, and a tiny Llama trains on trn3 with eager's numbers and conforming kernels (the
session's conformance gate in conftest.py checks every kernel against its recorded target).
"""
from __future__ import annotations

import ast
import dataclasses

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from _compare import FP32
from models.blocks import tiny_llama

from neuron_inductor import config, pipeline, stats
from neuron_inductor.codegen.conform import conformance_findings, module_target
from neuron_inductor.graph.passes import run_passes
from neuron_inductor.lowering.fused.group import sbuf_peak
from neuron_inductor.spec import ALU_ENGINES, INSTRS, NC_VERSIONS
from neuron_inductor.target import TARGETS, TRN1, TRN2, TRN3, common_limit, get_target

pytestmark = pytest.mark.smoke  # runs on every supported torch in CI (.ci/run)


def test_trn3_is_neuroncore_v4_with_the_documented_numbers():
    assert get_target("trn3") is TRN3 and TRN3.nc_version == 4
    assert TRN3.partitions == 128 and TRN3.psum_bytes_per_partition * 128 == 2 * 2**20  # PSUM 2 MiB
    assert 256 * 1024 > TRN3.sbuf_bytes_per_partition > TRN2.sbuf_bytes_per_partition  # 32 MiB SBUF
    assert (TRN3.tensor_clock_hz, TRN3.vector_clock_hz, TRN3.scalar_clock_hz) == (2.4e9, 1.2e9, 1.2e9)
    assert TRN3.hbm_bytes_per_s * 8 == pytest.approx(4.7e12)
    assert TRN3.peak_bf16_flops == pytest.approx(79e12, rel=0.01)


def test_trn3_derives_undocumented_rates_from_trn2():
    """Fields the trn3 pages do not give follow TRN2, so recalibrating TRN2 carries over."""
    changed = {f.name for f in dataclasses.fields(TRN3) if getattr(TRN3, f.name) != getattr(TRN2, f.name)}
    assert changed == {"name", "sbuf_bytes_per_partition", "vector_clock_hz", "hbm_bytes_per_s",
                       "dma_engine_bytes_per_s", "nc_version"}
    assert TRN3.dma_engine_bytes_per_s / TRN2.dma_engine_bytes_per_s == pytest.approx(4.9 / 3.5)


def test_common_limits_still_hold_with_trn3():
    assert common_limit("partitions") == 128 and common_limit("matmul_n_max") == 512
    with pytest.raises(ValueError, match="differ"):
        common_limit("sbuf_bytes_per_partition")


def test_every_target_is_configurable_and_has_spec_rows():
    assert set(TARGETS) == {"trn1", "trn2", "trn3"}
    for name, t in TARGETS.items():
        assert config.get_config().replace(target=name).target == name
        assert t.nc_version in NC_VERSIONS
    for spec in INSTRS.values():
        assert set(spec.engines) == set(NC_VERSIONS), spec.name
    for op, rows in ALU_ENGINES.items():
        assert set(rows) == set(NC_VERSIONS), op
    assert TRN1.nc_version == 2 and TRN2.nc_version == 3


def _gemm_sbuf(target: str) -> int:
    """Peak SBUF per partition of a Llama-7B o-projection GEMM with its residual add fused (traced
    on meta tensors, lowered, never run)."""
    shapes = ((2048, 4096), (4096, 4096), (2048, 4096))
    args = [torch.empty(s, dtype=torch.bfloat16, device="meta") for s in shapes]
    gm = make_fx(lambda x, w, r: (x @ w.t() + r,), tracing_mode="fake")(*args)
    lg = pipeline.partition_and_lower(run_passes(gm), config.get_config().replace(target=target, cache=False),
                                      "sbuf")
    (k,) = [k for k in lg.program.kernels if "mm" in k.name]
    return sbuf_peak(k.body)


def test_trn3_gemm_plans_use_the_larger_sbuf():
    trn2, trn3 = _gemm_sbuf("trn2"), _gemm_sbuf("trn3")
    assert trn2 <= TRN2.sbuf_bytes_per_partition and trn3 <= TRN3.sbuf_bytes_per_partition
    assert trn3 > trn2 * 1.1  # 201728 vs 166400 B: taller blocks, the weight transposed fewer times


def test_tiny_llama_trains_on_trn3_like_eager(tmp_path):
    pytest.importorskip("transformers")
    stats.reset("compile", "fallback_ops")
    model = tiny_llama()
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    ref = model(input_ids=ids, labels=ids)
    ref.loss.backward()
    rgrads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    cm = torch.compile(model, backend="neuron", options={"fallback": "error", "target": "trn3",
                                                              "debug_dir": str(tmp_path)})
    out = cm(input_ids=ids, labels=ids)
    torch.testing.assert_close(out.logits, ref.logits, **FP32)
    out.loss.backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, rgrads[n], rtol=1e-4, atol=1e-5, msg=n)
    assert not stats.fallback_ops() and stats.compiled()["graph_fallbacks"] == 0
    modules = [p.read_text() for p in tmp_path.rglob("kernels.py")]
    assert len(modules) >= 2  # forward and backward
    for src in modules:
        assert module_target(ast.parse(src)) == "trn3"
        assert conformance_findings(src) == []


@pytest.fixture(scope="module")
def conformance_bench():
    """benchmarks/conformance.py as a module (it imports its sibling _models)."""
    import importlib.util
    import os
    import sys
    bench = os.path.join(os.path.dirname(__file__), "..", "benchmarks")
    sys.path.insert(0, bench)
    try:
        spec = importlib.util.spec_from_file_location("conformance_bench", os.path.join(bench, "conformance.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(bench)


@pytest.mark.parametrize("program", ["moe_block", "embedding_xent", "ragged", "rotary_pos8192",
                                     "rmsnorm_layernorm"])
def test_conformance_programs_compile_for_trn3(conformance_bench, program, tmp_path, monkeypatch):
    """The conformance benchmark's programs the tiny Llama does not cover (top-k routing, embedding
    gather + cross-entropy, ragged tiles, large rotary positions, norms), compiled for trn3: every
    kernel generated and linted against trn3's rules, none refused, nothing run eagerly, and its
    dump dir removed afterwards."""
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    r = conformance_bench.measure(program, "trn3")
    assert r["error"] is None and r["kernels"] > 0
    assert r["findings"] == {} and r["graph_fallbacks"] == 0
    assert r["dump"] is None and not list(tmp_path.glob("ni_conf_*"))
