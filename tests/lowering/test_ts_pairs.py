"""Pairs of one-operator VectorE ``tensor_scalar`` s become one two-operator instruction
(``lowering/ts_pairs.py``, applied by ``KernelBuilder.finish``) only where the intermediate fp32 tile
is read by the second alone and dead after it; values stay bit-identical to eager's chain."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from neuron_inductor.ir import Instr, Loop
from neuron_inductor.lowering.builder import KernelBuilder
from neuron_inductor.spec import AluOp
from neuron_inductor.target import get_target

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _ops import check_cases, randn  # noqa: E402


def _instrs(body) -> list[Instr]:
    out = []
    for s in body:
        out += _instrs(s.body) if isinstance(s, Loop) else ([s] if isinstance(s, Instr) else [])
    return out


def _kb():
    kb = KernelBuilder("k", get_target("trn1"))
    x, y, z = (kb.tile((128, 64), "float32", prefix=p) for p in "xyz")
    return kb, x.region(128, 64), y.region(128, 64), z.region(128, 64)


def test_pair_whose_intermediate_dies_is_one_instruction():
    kb, x, y, z = _kb()
    kb.tensor_scalar(y, data=x, op0=AluOp.reciprocal, operand0=0.0)
    kb.tensor_scalar(z, data=y, op0=AluOp.add, operand0=1e-8)
    kb.tensor_scalar(y, data=z, op0=AluOp.reciprocal, operand0=0.0)  # y overwritten: its value died
    ins = [i for i in _instrs(kb.finish().body) if i.op == "tensor_scalar"]
    assert len(ins) == 2
    assert (ins[0].dst.tile, ins[0].srcs["data"].tile) == (z.tile, x.tile)
    assert (str(ins[0].attrs["op0"]), str(ins[0].attrs["op1"]), ins[0].srcs["operand1"]) == \
        ("reciprocal", "add", 1e-8)


@pytest.mark.parametrize("case", ["read_again", "input_overwritten", "bf16", "outer_tile"])
def test_pairs_that_must_stay_apart(case):
    kb, x, y, z = _kb()
    if case == "bf16":
        y = kb.tile((128, 64), "bfloat16", prefix="h").region(128, 64)
    if case == "outer_tile":  # the intermediate lives beyond the loop body
        with kb.loop(4, "sequential", "i"):
            kb.tensor_scalar(y, data=x, op0=AluOp.multiply, operand0=3.0)
            kb.tensor_scalar(z, data=y, op0=AluOp.add, operand0=1.0)
    else:
        kb.tensor_scalar(y, data=x, op0=AluOp.multiply, operand0=3.0)
        if case == "input_overwritten":
            kb.tensor_scalar(x, data=z, op0=AluOp.add, operand0=2.0)
        kb.tensor_scalar(z, data=y, op0=AluOp.add, operand0=1.0)
        if case == "read_again":
            kb.tensor_tensor(x, data1=y, data2=z, op=AluOp.add)
    ins = [i for i in _instrs(kb.finish().body) if i.op == "tensor_scalar"]
    assert all("op1" not in i.attrs for i in ins)


def _adamw(theta, g, m, v):
    m_t = 0.9 * m + 0.1 * g
    v_t = 0.999 * v + 0.001 * g * g
    return theta - 0.01 * m_t / (torch.sqrt(v_t * 1000) + 1e-8), 1 / (v + 1) * 3 + 1 / (v + 1)


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_chains_match_eager(target):
    # an AdamW step (its 1 / (sqrt + eps) pairs) and a reciprocal read twice, with NaN and Inf rows
    args = [randn((130, 96), seed=s) for s in range(4)]
    args[3] = args[3].abs()
    args[1][5, 3], args[3][70, 0] = float("nan"), float("inf")
    check_cases(_adamw, [args], target=target)
