"""Input mutations (``copy_`` into a graph input) survive fusion and run after every read of the old
value. Found through TRL's chunked log-prob (an online softmax updating its running max in place):
the ``copy_`` nodes have no users, were never a group output, and silently vanished."""
from __future__ import annotations

import pytest
import torch

import neuron_inductor.lowering  # noqa: F401  (import order: lowering imports fusion)
from neuron_inductor.graph.fusion import partition


def _online_softmax_step(z, m, s):
    new_m = torch.maximum(m, z.amax(-1))
    s.mul_(torch.exp(m - new_m)).add_(torch.exp(z - new_m.unsqueeze(-1)).sum(-1))
    m.copy_(new_m)


def _run(fn, *args, fusion=True):
    with torch.no_grad():
        torch.compile(fn, backend="neuron", options={"fusion": fusion})(*args)


@pytest.mark.parametrize("fusion", [True, False])
def test_mutated_inputs_are_written_after_their_reads(fusion):
    z = torch.randn(30, 130)
    m0, s0 = torch.randn(30), torch.rand(30) + 0.5
    m1, s1 = m0.clone(), s0.clone()
    _online_softmax_step(z, m0, s0)
    _run(_online_softmax_step, z, m1, s1, fusion=fusion)
    torch.testing.assert_close(m1, m0)
    torch.testing.assert_close(s1, s0)


def test_mutation_of_a_tensor_the_kernel_also_reduces_over():
    def f(x):
        x.copy_(x.sum(-1, keepdim=True) - x)  # every element is read before any is overwritten

    x = torch.randn(5, 200)
    expected = x.sum(-1, keepdim=True) - x
    _run(f, x)
    torch.testing.assert_close(x, expected)


def test_copy_is_a_group_output_and_fuses_into_a_producer_that_does_not_read_it():
    def f(x, buf):
        buf.copy_(x * 2 + 1)

    x, buf = torch.randn(4, 8), torch.zeros(4, 8)
    gm = torch.fx.experimental.proxy_tensor.make_fx(
        lambda a, b: torch.ops.aten.copy_.default(b, a * 2 + 1))(x, buf)
    for n in gm.graph.nodes:  # make_fx leaves meta["val"]; fusion reads it
        assert n.op != "call_function" or "val" in n.meta
    groups = partition(gm)
    copy_nodes = [n for n in gm.graph.nodes if n.target is torch.ops.aten.copy_.default]
    owner = [g for g in groups if copy_nodes[0] in g.members]
    assert len(owner) == 1 and copy_nodes[0] in owner[0].outputs
    assert any(n.target is torch.ops.aten.mul.Tensor for n in owner[0].nodes)  # fused with producer
    _run(f, x, buf)
    torch.testing.assert_close(buf, x * 2 + 1)
