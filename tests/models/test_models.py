"""Whole models against eager PyTorch: an MLP, a plain-torch transformer block, a tiny HF Llama.

fp32 is compared tightly. For bf16 we do not compare two bf16 computations with each other (the
compiler keeps fused intermediates in fp32, eager rounds after every op, so they legitimately differ);
instead both are measured against the fp32 result and the compiled error must not exceed eager's own
bf16 error by more than a small factor. That tolerance means something: a wrong kernel is off by O(1).
"""
from __future__ import annotations

import copy

import pytest
import torch

from _compare import FP32
from models.blocks import TransformerBlock, mlp, tiny_llama
from torch.utils._python_dispatch import TorchDispatchMode

from neuron_inductor import stats


def _grads(model, x, out, seed):
    params = [x] + list(model.parameters())
    return torch.autograd.grad(out, params, seed)


def _run(model, x, compiled: bool, **options):
    m = torch.compile(model, backend="neuron", options=options) if compiled else model
    out = m(x)
    seed = torch.ones_like(out) / out.numel() ** 0.5
    return out, _grads(model, x, out, seed)


def _fp32_check(make_model, x):
    torch.manual_seed(0)
    model = make_model()
    x1 = x.clone().requires_grad_(True)
    x2 = x.clone().requires_grad_(True)
    ref, rgrads = _run(model, x1, compiled=False)
    out, grads = _run(model, x2, compiled=True, fallback="error")
    torch.testing.assert_close(out, ref, **FP32)
    for g, r in zip(grads, rgrads):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)


def _rel_err(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12)).item()


def _bf16_check(make_model, x, factor=2.0):
    torch.manual_seed(0)
    model = make_model()
    ref, rgrads = _run(model, x.clone().requires_grad_(True), compiled=False)
    m16 = copy.deepcopy(model).to(torch.bfloat16)
    x16 = x.to(torch.bfloat16)
    e_out, e_grads = _run(m16, x16.clone().requires_grad_(True), compiled=False)
    c_out, c_grads = _run(m16, x16.clone().requires_grad_(True), compiled=True, fallback="error")
    assert c_out.dtype == torch.bfloat16
    eager_err, ours = _rel_err(e_out, ref), _rel_err(c_out, ref)
    assert ours <= factor * eager_err + 1e-3, (ours, eager_err)
    for e, c, r in zip(e_grads, c_grads, rgrads):
        assert _rel_err(c, r) <= factor * _rel_err(e, r) + 1e-3


@pytest.mark.smoke
def test_mlp_fp32():
    _fp32_check(mlp, torch.randn(300, 64))


@pytest.mark.smoke
def test_mlp_bf16():
    _bf16_check(mlp, torch.randn(300, 64))


@pytest.mark.smoke
def test_transformer_block_fp32_zero_fallbacks():
    stats.reset("compile", "fallback_ops")
    _fp32_check(TransformerBlock, torch.randn(2, 40, 64))
    assert not stats.fallback_ops()


def test_transformer_block_bf16():
    _bf16_check(TransformerBlock, torch.randn(2, 32, 64))


def test_transformer_block_fuses():
    """Far fewer kernels than ATen ops: fusion works."""
    stats.reset("compile", "fallback_ops")
    _run(TransformerBlock(), torch.randn(2, 16, 64, requires_grad=True), compiled=True)
    assert stats.compiled()["graphs_compiled"] == 2
    # counted again from the artifacts' metadata: kernels vs ATen ops
    assert stats.compiled()["kernels_generated"] < 0.6 * stats.compiled()["aten_ops"]


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(str(func))
        return func(*args, **(kwargs or {}))


# metadata-only ops: allocations, views, reinterpretation (torch.from_numpy shows as lift_fresh/set_)
_ALLOWED = {"aten.as_strided.default", "aten.detach.default", "aten.empty.memory_format",
            "aten.empty_strided.default", "aten.lift_fresh.default", "aten.view.dtype",
            "aten.view.default", "aten.alias.default", "aten._unsafe_view.default",
            "aten.set_.source_Storage_storage_offset", "aten.set_.source_Storage"}


@pytest.fixture
def recorder(monkeypatch):
    """Records the ATen ops dispatched while generated code runs (call ``recorder.start()`` first)."""
    from neuron_inductor.runtime import loader

    rec = _Recorder()
    orig = loader.CompiledModule.__call__

    def recording(self, args):
        with rec:
            return orig(self, args)

    rec.start = lambda: monkeypatch.setattr(loader.CompiledModule, "__call__", recording)
    return rec


def test_steady_state_dispatches_no_aten_compute(recorder):
    """Independent of our own counters: the generated code runs every op in kernels."""
    torch.manual_seed(0)
    model = TransformerBlock()
    x = torch.randn(2, 16, 64, requires_grad=True)
    cm = torch.compile(model, backend="neuron")
    out = cm(x)
    seed = torch.randn_like(out)
    _grads(model, x, out, seed)
    recorder.start()
    out = cm(x)
    _grads(model, x, out, seed)
    assert recorder.ops, "the recorder saw nothing: the test would pass vacuously"
    assert recorder.ops <= _ALLOWED, sorted(recorder.ops - _ALLOWED)


def test_recorder_sees_a_fallback(recorder):
    """The dispatch-mode check can fail: a declared fallback shows up as an ATen compute op."""
    recorder.start()
    f = torch.compile(lambda x: torch.sin(x).to(torch.float64), backend="neuron")
    f(torch.randn(8))
    assert recorder.ops - _ALLOWED


@pytest.mark.smoke
def test_tiny_llama_logits_and_grads_zero_fallbacks():
    pytest.importorskip("transformers")  # the `hf` extra
    stats.reset("compile", "fallback_ops")
    model = tiny_llama()
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    ref = model(input_ids=ids, labels=ids)
    ref.loss.backward()
    rgrads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    cm = torch.compile(model, backend="neuron", options={"fallback": "error"})
    out = cm(input_ids=ids, labels=ids)
    torch.testing.assert_close(out.logits, ref.logits, **FP32)
    torch.testing.assert_close(out.loss, ref.loss, **FP32)
    out.loss.backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, rgrads[n], rtol=1e-4, atol=1e-5, msg=n)
    assert not stats.fallback_ops()
