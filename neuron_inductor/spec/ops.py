"""ALU operators and ScalarE activation functions, as the NKI documentation lists them.

Sources (aws-neuron/aws-neuron-sdk, SDK 2.32 docs unless noted):
* ``nki/api/nki.api.shared.rst`` table ``tbl-aluop`` ("Supported Math Operators by NKI ISA"): the
  operator set, its bitvec / arithmetic split and the "Legal Reduction op" column;
* the same table in SDK 2.26 (``general/nki/api/nki.api.shared.rst``) had a "Supported Engine"
  column, dropped later without a replacement; it is the only per-engine operator list the docs
  have, so :data:`ALU_ENGINES` keeps it (operators the old table did not list are unrestricted);
* ``nki/api/nki.api.shared.rst`` table ``tbl-act-func``: activation functions and their valid
  input ranges (outside them "the Scalar Engine will generate invalid output results").

Both enums are ``StrEnum``s so a plain string such as ``"multiply"`` compares equal to
``AluOp.multiply``: lowering may name operators either way.
"""
from __future__ import annotations

import math
from enum import StrEnum
from typing import Any, Mapping


class AluOp(StrEnum):
    """Exactly the ``op`` column of ``tbl-aluop`` (``nl.divide`` is *not* an ALU operator)."""

    invert = "invert"
    bitwise_and = "bitwise_and"
    bitwise_or = "bitwise_or"
    bitwise_xor = "bitwise_xor"
    left_shift = "left_shift"
    right_shift = "right_shift"
    add = "add"
    subtract = "subtract"
    multiply = "multiply"
    maximum = "maximum"
    minimum = "minimum"
    equal = "equal"
    not_equal = "not_equal"
    greater_equal = "greater_equal"
    greater = "greater"
    less_equal = "less_equal"
    less = "less"
    logical_and = "logical_and"
    logical_or = "logical_or"
    logical_xor = "logical_xor"
    power = "power"
    abs_max = "abs_max"
    abs_min = "abs_min"
    abs = "abs"
    square = "square"
    relu = "relu"
    rsqrt = "rsqrt"
    reciprocal = "reciprocal"


A = AluOp
#: "Bitvec" rows: integer dtypes, bit patterns, no casting
BITVEC = frozenset({A.invert, A.bitwise_and, A.bitwise_or, A.bitwise_xor, A.left_shift, A.right_shift})
#: "Arithmetic Unary" rows (and bitwise not): ``operand`` must be None or 0
UNARY = frozenset({A.abs, A.square, A.relu, A.rsqrt, A.reciprocal, A.invert})
COMPARE = frozenset({A.equal, A.not_equal, A.greater_equal, A.greater, A.less_equal, A.less})
LOGICAL = frozenset({A.logical_and, A.logical_or, A.logical_xor})
#: "Legal Reduction op" = Y
REDUCTION = frozenset({A.bitwise_and, A.bitwise_or, A.bitwise_xor, A.add, A.subtract, A.multiply,
                       A.maximum, A.minimum, A.logical_and, A.logical_or, A.logical_xor})

_V, _G, _S = "vector", "gpsimd", "scalar"
#: SDK 2.26 ``tbl-aluop`` "Supported Engine" column, plus its note: "Add and Multiply are supported
#: on Scalar Engine only from NeuronCore-v3" (value: engines per NeuronCore version 2, 3 and 4).
#: That table predates NeuronCore-v4 and no later one lists engines per operator; the Trainium3 NKI
#: architecture guide says only that v4 ScalarE "natively supports the tensor_scalar and
#: tensor_copy instructions (same as VectorE)", without an operator list, so v4 keeps v3's rows
#: (stricter than the hardware may be, never looser)
ALU_ENGINES: dict[AluOp, dict[int, frozenset[str]]] = {}


def _rows(v2: frozenset[str], v3: frozenset[str]) -> dict[int, frozenset[str]]:
    return {2: v2, 3: v3, 4: v3}


for _op in BITVEC | COMPARE | LOGICAL | {A.subtract, A.maximum, A.minimum}:
    ALU_ENGINES[_op] = _rows(frozenset({_V}), frozenset({_V}))
for _op in (A.add, A.multiply):
    ALU_ENGINES[_op] = _rows(frozenset({_V, _G}), frozenset({_V, _G, _S}))
ALU_ENGINES[A.rsqrt] = _rows(frozenset({_G, _S}), frozenset({_G, _S}))
ALU_ENGINES[A.reciprocal] = _rows(frozenset({_V, _S}), frozenset({_V, _S}))
ALU_ENGINES[A.abs] = _rows(frozenset({_V, _S}), frozenset({_V, _S}))
ALU_ENGINES[A.power] = _rows(frozenset({_G}), frozenset({_G}))


class ActFunc(StrEnum):
    """Exactly the ``Accepted op by Scalar Engine`` column of ``tbl-act-func`` (no ``cos``)."""

    copy = "copy"
    square = "square"
    sigmoid = "sigmoid"
    relu = "relu"
    prelu = "prelu"
    gelu = "gelu"
    gelu_dx = "gelu_dx"
    gelu_apprx_tanh = "gelu_apprx_tanh"
    gelu_apprx_sigmoid = "gelu_apprx_sigmoid"
    gelu_apprx_sigmoid_dx = "gelu_apprx_sigmoid_dx"
    silu = "silu"
    silu_dx = "silu_dx"
    tanh = "tanh"
    softplus = "softplus"
    mish = "mish"
    erf = "erf"
    erf_dx = "erf_dx"
    exp = "exp"
    log = "log"
    sin = "sin"
    arctan = "arctan"
    sqrt = "sqrt"
    rsqrt = "rsqrt"
    reciprocal = "reciprocal"
    sign = "sign"
    abs = "abs"


#: "Valid Input Range" column: (low, high, magnitude_only). magnitude_only means ``±[low, high]``
#: (reciprocal): the range applies to ``|x|``. Functions not listed are valid on [-inf, inf].
ACT_RANGE: dict[ActFunc, tuple[float, float, bool]] = {
    ActFunc.log: (2.0 ** -64, 2.0 ** 64, False),
    ActFunc.sin: (-math.pi, math.pi, False),
    ActFunc.arctan: (-math.pi / 2, math.pi / 2, False),
    ActFunc.sqrt: (2.0 ** -116, 2.0 ** 118, False),
    ActFunc.rsqrt: (2.0 ** -87, 2.0 ** 97, False),
    ActFunc.reciprocal: (2.0 ** -42, 2.0 ** 42, True),
}


def name_of(op: object) -> str | None:
    """The ``nl`` name of an operator given as a string, an enum member or an object with a
    ``name`` (the simulator's ``nl.add``); None for anything else."""
    if isinstance(op, str):
        return str(op)
    name = getattr(op, "name", None)
    return name if isinstance(name, str) else None


def alu_op(op: object) -> AluOp | None:
    name = name_of(op)
    return AluOp(name) if name in AluOp.__members__ else None


def act_func(op: object) -> ActFunc | None:
    name = name_of(op)
    return ActFunc(name) if name in ActFunc.__members__ else None


def check_op_names(opcode: str, attrs: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` when instruction ``opcode`` names an operator the tables do not list.

    ``activation`` names a function of ``tbl-act-func`` in ``op``; every other instruction names ALU
    operators (``tbl-aluop``) in ``op`` / ``op0`` / ``op1``. The IR calls this when an instruction
    is built, so a misspelt operator fails in the lowering that wrote it, not in the simulator."""
    parse, roles = (act_func, ("op",)) if opcode == "activation" else (alu_op, ("op", "op0", "op1"))
    for role in roles:
        v = attrs.get(role)
        if v is not None and parse(v) is None:
            table = "an activation function (tbl-act-func)" if opcode == "activation" else \
                "an ALU operator (tbl-aluop)"
            raise ValueError(f"{opcode} {role}={name_of(v) or v!r} is not {table}")
