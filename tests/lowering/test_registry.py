"""The lowering registry: one front door (register_lowering), one context, supports() consulted by
the decompositions and the partitioner, and the older decorators as the same registry."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import neuron_inductor.lowering  # noqa: F401  (registers every lowering)
from neuron_inductor.graph.decompositions import decomposition_table
from neuron_inductor.lowering import registry
from neuron_inductor.lowering.attention import FLASH_FWD

aten = torch.ops.aten


@pytest.fixture
def scratch_registry(monkeypatch):
    """Registrations made by a test are undone after it."""
    for name in ("LOWERINGS", "POINTWISE", "REDUCTIONS", "KERNELS"):
        monkeypatch.setattr(registry, name, dict(getattr(registry, name)))
    monkeypatch.setattr(registry, "_TABLES", {"pointwise": registry.POINTWISE,
                                              "reduction": registry.REDUCTIONS,
                                              "kernel": registry.KERNELS})


def test_matmul_is_registered_like_every_kernel_with_an_epilogue():
    rec = registry.find_lowering(aten.mm.default)
    assert rec.kind == "kernel" and rec.epilogue and rec.takes_context
    assert registry.takes_epilogue(aten.bmm.default) and not registry.takes_epilogue(aten.embedding.default)
    assert registry.op_kind(aten.mm.default) == "kernel"


def test_front_door_and_old_decorators_are_one_registry(scratch_registry):
    seen = []

    @registry.register_lowering(aten.cumprod.default, kind="kernel", supports=lambda x, dim, **kw: dim == 0 or "dim")
    def new_style(ctx):
        seen.append(("ctx", ctx.node))

    @registry.register_kernel(aten.flip.default)
    def old_style(n, sources, kb, out_tensors, out_meta, cfg):
        seen.append(("old", n, cfg))

    registry.register_lowering(aten.nansum.default, kind="reduction")(("add", 0.0))
    registry.REDUCTIONS[aten.logsumexp.default] = ("add", 0.0)  # a direct table write still counts

    assert registry.op_kind(aten.cumprod.default) == registry.op_kind(aten.flip.default) == "kernel"
    assert registry.op_kind(aten.nansum.default) == registry.op_kind(aten.logsumexp.default) == "reduction"
    assert registry.find_lowering(aten.logsumexp.default).impl == ("add", 0.0)
    ctx = registry.KernelContext("node", "group", {}, {}, {}, "kb", "cfg", "target")
    registry.find_lowering(aten.cumprod.default).lower(ctx)
    registry.find_lowering(aten.flip.default).lower(ctx)
    assert seen == [("ctx", "node"), ("old", "node", "cfg")]
    assert registry.supports(aten.cumprod.default, torch.ones(3), 0) is True
    assert registry.supports(aten.cumprod.default, torch.ones(3), 1) == "dim"
    assert registry.supports(aten.flip.default, torch.ones(3), [0]) is True  # declares nothing
    assert registry.supports(aten.cummax.default, torch.ones(3), 0) is False  # no lowering
    with pytest.raises(ValueError, match="unknown lowering kind"):
        registry.register_lowering(aten.flip.default, kind="scan")


def test_flash_attention_support_is_answered_by_the_registry():
    with FakeTensorMode():
        q = torch.empty(1, 2, 16, 8)
        assert registry.supports(FLASH_FWD, q, q, q, 0.0) is True
        assert registry.supports(FLASH_FWD, q, q, q, 0.1) == "dropout"
        assert registry.supports(FLASH_FWD, q, q, q, 0.0, attn_mask=torch.empty(3, 16, 16)) == "mask shape"


def test_decompositions_ask_the_registry(monkeypatch):
    """The decomposition of flash attention keeps the op exactly when the registered lowering says
    it supports the case (no side channel to the attention module)."""
    decomp = decomposition_table()[FLASH_FWD]
    q = torch.randn(1, 2, 16, 8)
    assert decomp(q, q, q) is NotImplemented  # kept whole: our kernel takes it
    rec = registry.LOWERINGS[FLASH_FWD]
    monkeypatch.setitem(registry.LOWERINGS, FLASH_FWD,
                        registry.Lowering(rec.kind, rec.impl, lambda *a, **k: "refused by the test",
                                          rec.epilogue, rec.takes_context))
    out, lse = decomp(q, q, q)  # now decomposed to math, with torch's semantics
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, q, q))


def test_partitioner_declares_a_refused_case_a_fallback_with_the_reason(monkeypatch):
    from torch.fx.experimental.proxy_tensor import make_fx

    from neuron_inductor.graph.fusion import partition

    gm = make_fx(lambda a, b: (torch.mm(a, b),))(torch.randn(4, 8), torch.randn(8, 3))
    assert [g.kind for g in partition(gm)] == ["matmul"]
    rec = registry.LOWERINGS[aten.mm.default]
    monkeypatch.setitem(registry.LOWERINGS, aten.mm.default,
                        registry.Lowering(rec.kind, rec.impl, lambda a, b: "too small", rec.epilogue))
    groups = partition(gm)
    assert [(g.kind, g.reason) for g in groups] == [("fallback", "too small")]
