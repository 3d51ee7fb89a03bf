"""IR nodes are frozen once built, and operator names are checked where an instruction is built."""
from __future__ import annotations

import dataclasses

import pytest

from neuron_inductor.ir import HBMTensor, Instr, Tile
from neuron_inductor.lowering.builder import KernelBuilder
from neuron_inductor.spec import AluOp
from neuron_inductor.target import get_target


def _tile() -> Tile:
    return Tile("t", (128, 8), "float32")


def test_nodes_are_frozen():
    t, h = _tile(), HBMTensor("in0", 16, "float32", "input", "arg0")
    ins = Instr("vector", "tensor_scalar", t.full(), {"data": t.full(), "operand0": 1.0}, {"op0": "add"})
    for node, field in ((t, "depth"), (h, "kind"), (h, "host_name"), (ins, "op")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(node, field, None)


@pytest.mark.parametrize("opcode, attrs", [
    ("tensor_scalar", {"op0": "multply"}),             # a typo
    ("tensor_scalar", {"op0": "add", "op1": "divide"}),  # nl.divide is not an ALU operator
    ("tensor_tensor", {"op": "exp"}),                   # an activation function, not an ALU operator
    ("tensor_reduce", {"op": "mean", "axis": (1,)}),
])
def test_unknown_alu_operator_fails_when_built(opcode, attrs):
    t = _tile()
    srcs = {"data": t.full()} if opcode != "tensor_tensor" else {"data1": t.full(), "data2": t.full()}
    with pytest.raises(ValueError, match="not an ALU operator"):
        Instr("vector", opcode, t.full(), srcs, attrs)


def test_unknown_activation_fails_when_built():
    t = _tile()
    with pytest.raises(ValueError, match="not an activation function"):
        Instr("scalar", "activation", t.full(), {"data": t.full()}, {"op": "cos"})  # no cos on ScalarE
    # table names, as strings or enum members, build
    Instr("scalar", "activation", t.full(), {"data": t.full()}, {"op": "exp"})
    Instr("vector", "tensor_scalar", t.full(), {"data": t.full(), "operand0": 2.0}, {"op0": AluOp.multiply})


def test_builder_sets_declared_fields_at_construction():
    kb = KernelBuilder("k", get_target("trn2"))
    p = kb.param("x", 16, "float32", "inout")
    assert (p.kind, p.host_name) == ("inout", "x")
    assert kb.param("x", 16, "float32") is p  # a later read binds the same parameter
    kb.param("y", 16, "float32")
    with pytest.raises(ValueError, match="declared written after the kernel read it"):
        kb.param("y", 16, "float32", "inout")
    assert kb.tile((128, 4), "float32").depth == 1
    with kb.loop(4) as _:
        inner = kb.tile((128, 4), "float32")
        assert inner.depth == 2
        kb.release(inner)
        assert kb.tile((128, 4), "float32") is inner  # recycled within its own block
