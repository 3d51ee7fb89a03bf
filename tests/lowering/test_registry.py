"""The lowering registry: one decorator (register_lowering), kernels called as fn(ctx, *schema-bound
args), supports() consulted by the decompositions and the partitioner, and no op both decomposed and
lowered."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import neuron_inductor.lowering  # noqa: F401  (registers every lowering)
from neuron_inductor.graph.decompositions import decomposition_table
from neuron_inductor.lowering import registry
from neuron_inductor.lowering.attention.common import FLASH_FWD

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
    assert rec.kind == "kernel" and rec.epilogue
    assert registry.takes_epilogue(aten.bmm.default) and not registry.takes_epilogue(aten.embedding.default)
    assert registry.op_kind(aten.mm.default) == "kernel"
    # table-built registrations land in their kind too
    assert registry.op_kind(aten.add.Tensor) == registry.op_kind(aten.exp.default) == "pointwise"
    assert registry.op_kind(aten.amax.default) == "reduction"
    # fused groups and the matmul variants are group lowerings of the same registry
    assert {registry.find_lowering(k).kind for k in ("fused", "matmul_multi", "matmul_rows")} == {"group"}


def test_one_decorator_binds_kernel_arguments_from_the_schema(scratch_registry):
    from torch.fx.experimental.proxy_tensor import make_fx
    seen = []

    @registry.register_lowering(aten.cumprod.default, kind="kernel", supports=lambda x, dim, **kw: dim == 0 or "dim")
    def lower(ctx, x, dim, dtype):
        seen.append((ctx.node, x, dim, dtype))

    registry.register_lowering(aten.nansum.default, kind="reduction")(("add", 0.0))
    assert registry.op_kind(aten.cumprod.default) == "kernel"
    assert registry.op_kind(aten.nansum.default) == "reduction"
    gm = make_fx(lambda a: torch.cumprod(a, 0))(torch.ones(3))
    n = next(m for m in gm.graph.nodes if m.target is aten.cumprod.default)
    ctx = registry.KernelContext(n, "group", {}, {}, {}, "kb", "cfg", "target")
    registry.find_lowering(aten.cumprod.default).lower(ctx)
    assert seen == [(n, n.args[0], 0, None)]  # dtype: the schema's default, never written in the call
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
                                          rec.epilogue))
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


#: ops that have both a decomposition and a lowering today (shrink only). The first three are
#: guarded: their decomposition asks the lowering (``supports``) and keeps the op when it takes the
#: case. The rest are decomposed before lowering ever sees them, so their lowering serves only nodes
#: that graph passes create after decomposition.
BOTH_ALLOWED = {
    "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "aten._scaled_dot_product_flash_attention_for_cpu_backward.default", "aten.index_put.default",
    "aten.all.default", "aten.all.dim", "aten.any.default", "aten.any.dim", "aten.any.dims",
    "aten.arange.default", "aten.arange.start", "aten.sum.default", "aten.where.Scalar",
    "aten.where.ScalarOther", "aten.where.ScalarSelf", "aten.pow.Scalar", "aten.select_scatter.default",
}


def test_no_op_is_both_decomposed_and_lowered():
    """A decomposition silently wins over a lowering of the same op: registering both is an error
    unless the op is on the (shrinking) allow-list above."""
    both = {str(op) for op in decomposition_table() if registry.find_lowering(op) is not None}
    assert both <= BOTH_ALLOWED, f"ops with both a decomposition and a lowering: {sorted(both - BOTH_ALLOWED)}"
    stale = BOTH_ALLOWED - both
    assert not stale, f"no longer both decomposed and lowered; drop from BOTH_ALLOWED: {sorted(stale)}"
