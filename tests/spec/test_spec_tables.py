"""The instruction specification's tables say what the NKI docs say (spot checks of each table)."""
from __future__ import annotations

import pytest

from neuron_inductor.spec import (ACT_RANGE, INSTRS, RULES, ActFunc, AluOp, Opnd, act_func, alu_op,
                                  check_instr, resolve_engine)
from neuron_inductor.target import TRN1, TRN2

F32 = Opnd("sbuf", "float32", 16, 8)


def rules(*a, **k) -> list[str]:
    return [f.rule for f in check_instr(*a, **k)]


def test_every_rule_has_text_and_a_citation():
    for r in RULES.values():
        assert r.text and r.citation and r.id == r.id.lower()


def test_strings_compare_equal_to_enum_members():
    assert AluOp.multiply == "multiply" and ActFunc.exp == "exp"
    assert alu_op("divide") is None and act_func("cos") is None and act_func("negative") is None


def test_alu_table_is_the_documented_one():
    assert {"add", "subtract", "multiply", "maximum", "minimum", "power", "abs_max", "rsqrt",
            "bitwise_and", "left_shift", "right_shift", "logical_xor"} <= set(AluOp)
    assert "divide" not in set(AluOp) and "cos" not in set(ActFunc)


def test_activation_ranges():
    assert ACT_RANGE[ActFunc.sin][1] == pytest.approx(3.14159265)
    assert ActFunc.exp not in ACT_RANGE


def test_targets_have_their_generation():
    assert (TRN1.nc_version, TRN2.nc_version) == (2, 3)
    assert "scalar" not in INSTRS["tensor_copy"].engines[2] and "scalar" in INSTRS["tensor_copy"].engines[3]


@pytest.mark.nonconforming
def test_instr_known():
    assert rules("tensor_divide", "vector", "trn2", {"dst": F32}) == ["instr-known"]


@pytest.mark.nonconforming
def test_dtype_known():
    assert "dtype-known" in rules("tensor_copy", "vector", "trn2", {"dst": F32, "src": Opnd("sbuf", "float64")})


def test_default_engines():
    i32 = Opnd("sbuf", "int32")
    assert resolve_engine("tensor_tensor", None, {"dst": i32, "data1": i32, "data2": i32}, {"op": "add"}) == "gpsimd"
    assert resolve_engine("tensor_tensor", None, {"dst": i32, "data1": i32, "data2": i32},
                          {"op": "bitwise_and"}) == "vector"
    assert resolve_engine("tensor_tensor", None, {"dst": F32, "data1": F32, "data2": F32}, {"op": "power"}) == "gpsimd"
    assert resolve_engine("nc_transpose", None, {"dst": F32, "data": F32}, {}) == "vector"


def test_conforming_calls_have_no_findings():
    ps = Opnd("psum", "float32", 8, 8)
    assert not rules("nc_matmul", "tensor", "trn1", {"dst": ps, "stationary": Opnd("sbuf", "bfloat16", 16, 8),
                                                      "moving": Opnd("sbuf", "bfloat16", 16, 8)})
    assert not rules("tensor_scalar", "vector", "trn2", {"dst": F32, "data": F32, "operand0": -1},
                     {"op0": "multiply"})
    assert not rules("tensor_scalar", "scalar", "trn2", {"dst": F32, "data": F32, "operand0": 2.0,
                                                         "operand1": 1.0}, {"op0": "multiply", "op1": "add"})
    assert not rules("activation", "scalar", "trn1", {"dst": F32, "data": F32, "bias": Opnd("sbuf", "bfloat16", 16, 1)},
                     {"op": "exp"})
    assert not rules("memset", "vector", "trn2", {"dst": F32}, {"value": 0})  # nki-library does this


def _mm(target, dst_dtype="float32", n=8, s_dtype="bfloat16", m_dtype="bfloat16") -> list[str]:
    return rules("nc_matmul", "tensor", target, {"dst": Opnd("psum", dst_dtype, 8, n),
                                                 "stationary": Opnd("sbuf", s_dtype, 16, 8),
                                                 "moving": Opnd("sbuf", m_dtype, 16, n)})


def test_neuroncore_v4_matmul_rows():
    """nc_matmul 'Data types' / 'Tile size': from NeuronCore-v4 a bfloat16 dst, float8_e4m3fn inputs
    (never mixed with legacy float8_e4m3) and a moving tile up to 4096 (fp32 dst) / 8192 (bf16 dst)
    columns; trn1/trn2 keep float32 dst and 512 columns."""
    assert _mm("trn3", "bfloat16") == [] and _mm("trn2", "bfloat16") == ["matmul-dtype"]
    assert _mm("trn3", n=4096) == [] and _mm("trn3", n=4097) == ["matmul-shape"]
    assert _mm("trn3", "bfloat16", n=8192) == [] and _mm("trn3", "bfloat16", n=8193) == ["matmul-shape"]
    assert _mm("trn2", n=513) == ["matmul-shape"] and _mm("trn1", n=512) == []
    fn = dict(s_dtype="float8_e4m3fn", m_dtype="float8_e4m3fn")
    assert _mm("trn3", **fn) == [] and _mm("trn2", **fn) == ["matmul-dtype", "matmul-dtype"]
    assert _mm("trn3", s_dtype="float8_e4m3", m_dtype="float8_e4m3fn") == ["matmul-dtype"]


def test_neuroncore_v4_keeps_v3_engines():
    """v4's docstrings add indirection and new instructions, no engine changes: trn3 = trn2 rows."""
    for spec in INSTRS.values():
        assert spec.engines[4] == spec.engines[3], spec.name
    assert not rules("tensor_copy", "scalar", "trn3", {"dst": F32, "src": F32})
    assert rules("tensor_tensor", "gpsimd", "trn3", {"dst": F32, "data1": F32, "data2": F32},
                 {"op": "greater"}) == ["alu-op-engine"]
