"""Functional collectives lower to *declared collectives*: a host call of torch's own
``_c10d_functional`` op in the wrapper, counted apart from fallbacks (and allowed with
``fallback="error"``: communication is not a missing lowering)."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from neuron_inductor.codegen.wrapper import generate_wrapper_module
from neuron_inductor.ir import Collective, Program, Ref, TensorMeta
from neuron_inductor.runtime import host


def test_wrapper_renders_a_declared_collective():
    meta = TensorMeta((4,), (1,), 0, "float32")
    p = Program("g", ["arg0"], [meta], steps=[
        Collective(["cc1"], "_c10d_functional.all_reduce.default", (Ref("arg0"), "sum", "0"), {}),
        Collective(["cc2"], "_c10d_functional.wait_tensor.default", (Ref("cc1"),), {})],
        outputs=[Ref("cc2")])
    src = generate_wrapper_module(p)
    assert "cc1 = torch.ops._c10d_functional.all_reduce.default(arg0, 'sum', '0')" in src
    assert "host.count_collective('_c10d_functional.wait_tensor.default')" in src
    assert "count_fallback" not in src.split("def call")[1]
    assert p.collectives and not p.fallbacks


@pytest.fixture
def world_of_one(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


def test_compiled_all_reduce_is_a_collective_not_a_fallback(world_of_one):
    import torch.distributed._functional_collectives as funcol

    from neuron_inductor import stats

    def f(x):
        return funcol.all_reduce(x * 2, "sum", world_of_one).relu() + 1

    stats.reset("compile", "fallback_ops")
    host.reset_collective_counts()
    x = torch.randn(4, 8)
    out = torch.compile(f, backend="neuron", options={"fallback": "error"})(x)
    torch.testing.assert_close(out, f(x))
    assert dict(stats.fallback_ops()) == {}
    assert stats.compiled()["collectives"] == 2  # all_reduce + wait_tensor
    assert host.collective_counts() == {"_c10d_functional.all_reduce.default": 1,
                                        "_c10d_functional.wait_tensor.default": 1}
