"""IR nodes are frozen once built, and operator names are checked where an instruction is built."""
from __future__ import annotations

import dataclasses
import pickle

import pytest

from neuron_inductor.ir import HBMTensor, Instr, Kernel, Loop, Tile, loop_var
from neuron_inductor.lowering.builder import KernelBuilder, TVal, ValueKind
from neuron_inductor.spec import INSTRS, AluOp, Engine
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


def test_instr_operands_and_attributes_are_immutable():
    t = _tile()
    ins = Instr("vector", "tensor_scalar", t.full(), {"data": t.full(), "operand0": 1.0}, {"op0": "add"})
    with pytest.raises(TypeError, match="immutable"):
        ins.srcs["operand0"] = 2.0
    with pytest.raises(TypeError, match="immutable"):
        ins.attrs.update(op0="multiply")
    with pytest.raises(TypeError, match="immutable"):
        del ins.attrs["op0"]
    for node, field in ((Loop(loop_var("i"), 2), "kind"), (Kernel("k", [], [], []), "body")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(node, field, None)
    back = pickle.loads(pickle.dumps(ins.attrs))  # still a dict where one is needed
    assert type(back).__name__ == "FrozenMap" and back == {"op0": "add"}


def test_typed_methods_come_from_the_spec():
    kb = KernelBuilder("k", get_target("trn2"))
    t = kb.tile((128, 8), "float32")
    src = t.full()
    kb.tensor_scalar(t.full(), data=src, op0=AluOp.add, operand0=1.0, op1=None)
    ins = kb.body[-1]
    assert (ins.engine, ins.op) == (Engine.vector, "tensor_scalar")  # the spec's default engine
    assert ins.srcs["data"] is src and ins.srcs["operand0"] == 1.0 and dict(ins.attrs) == {"op0": "add"}
    kb.activation(t.full(), op="exp", data=t.full(), scale=0.5)
    assert kb.body[-1].engine == "scalar" and "scale" in kb.body[-1].srcs  # a tile keyword of the spec
    with pytest.raises(TypeError, match="no keyword 'operand'"):
        kb.tensor_scalar(t.full(), data=t.full(), op0="add", operand=1.0)
    with pytest.raises(AssertionError, match="cannot run on"):
        kb.nc_matmul(t.full(), stationary=t.full(), moving=t.full(), engine=Engine.vector)
    assert all(callable(getattr(kb, n)) for n in INSTRS if n != "dma_copy")


def test_tile_values_are_frozen():
    v = TVal.full(_tile().full())
    assert v.kind == ValueKind.full == "full"
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.bound = 1


def test_groups_are_frozen():
    from neuron_inductor.lowering.groups import Group, GroupKind
    g = Group.fused([], [], (4, 8), frozenset({1}))
    assert g.kind == GroupKind.fused and isinstance(g.nodes, tuple) and g.col_axes == frozenset()
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.col_axes = frozenset({0})
    with pytest.raises(AttributeError):
        g.nodes.append(None)
