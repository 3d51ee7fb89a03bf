"""The pointwise, reduction and matmul lowerings emit the documented instruction forms.

Checked on the tile IR dump of ordinary programs, for both targets: no ``divide`` ALU op and no
``cos`` activation (aws-neuron-sdk nki.api.shared ``tbl-aluop`` / ``tbl-act-func``); no PSUM tile
written by ``memset`` (the first matmul into a PSUM location must not accumulate onto another
instruction's value); no ``tensor_copy`` on the Scalar engine of trn1; arithmetic ``tensor_scalar``
operands are fp32 tiles or literals; ``memset`` literals typed like their tile; TensorE transposes
write their input's dtype. Rotary tables built in-graph from positions up to 8192 match eager.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from _ops import check_cases, randn

_ALLOC = re.compile(r"alloc (\w+): (sbuf|psum) (\w+)\[")
_INSTR = re.compile(r"^\s*(\w+)\.(\w+) (\w+)\[[^<]*<- ?(.*)$")
_BITVEC = ("bitwise_", "left_shift", "right_shift", "invert")


def _findings(ir_text: str, target: str) -> list[str]:
    """Findings per kernel (tile names are local to a kernel)."""
    return [f for k in re.split(r"^kernel ", ir_text, flags=re.M)[1:] for f in _kernel_findings(k, target)]


def _kernel_findings(ir: str, target: str) -> list[str]:
    tiles = {m.group(1): (m.group(2), m.group(3)) for m in _ALLOC.finditer(ir)}
    out = []
    for line in ir.splitlines():
        m = _INSTR.match(line)
        if not m:
            continue
        engine, op, dst, rest = m.groups()
        attrs = dict(re.findall(r"(\w+)=([^,\s\]]+(?:\[[^\]]*\])?)", rest))
        if "divide" in rest:
            out.append(f"divide: {line.strip()}")
        if op == "activation" and attrs.get("op") == "cos":
            out.append(f"cos activation: {line.strip()}")
        if op == "memset" and tiles.get(dst, ("", ""))[0] == "psum":
            out.append(f"memset into PSUM: {line.strip()}")
        if op == "memset":
            v, dt = attrs.get("value", ""), tiles.get(dst, ("", ""))[1]
            is_float = bool(re.search(r"[.en]|inf", v))
            if is_float != dt.startswith(("float", "bfloat")):
                out.append(f"{v} literal into a {dt} tile: {line.strip()}")
        if op == "tensor_copy" and engine == "scalar" and target == "trn1":
            out.append(f"tensor_copy on ScalarE (trn1): {line.strip()}")
        if op == "tensor_scalar":
            for k in ("operand0", "operand1"):
                name = attrs.get(k, "").split("[")[0]
                opk = attrs.get("op0" if k == "operand0" else "op1", "")
                if name in tiles and not opk.startswith(_BITVEC) and tiles[name][1] != "float32":
                    out.append(f"{k} {name} is {tiles[name][1]}: {line.strip()}")
        if op == "nc_transpose":
            src = attrs.get("data", "").split("[")[0]
            if src in tiles and tiles[src][1] != tiles.get(dst, ("", ""))[1]:
                out.append(f"transpose {tiles[src][1]} -> {tiles[dst][1]}: {line.strip()}")
    return out


def _rotary(pos, inv, x):
    ang = pos.float()[:, None] * inv[None, :]  # angles in-graph from int64 positions
    emb = torch.cat((ang, ang), -1)
    return x * emb.cos() + torch.cat((-x[:, 8:], x[:, :8]), -1) * emb.sin()


PROGRAMS = {
    "mlp_layernorm": (lambda x, w, b: F.layer_norm(F.gelu(F.linear(x, w, b)), (300,)) / 3,
                      lambda: (randn((260, 130)), randn((300, 130), seed=1), randn((300,), seed=2)), True),
    "bf16_linear": (lambda x, w: F.linear(x, w).softmax(-1),
                    lambda: (randn((260, 200), torch.bfloat16), randn((300, 200), torch.bfloat16, seed=1)),
                    True),
    "rotary_8192": (_rotary, lambda: (torch.arange(8192 - 300, 8193),
                                      1.0 / (10000 ** (torch.arange(0, 16, 2).float() / 16)),
                                      randn((301, 16))), False),
    "cross_entropy": (lambda x, t: F.cross_entropy(x, t, ignore_index=-100),
                      lambda: (randn((260, 500)), torch.randint(0, 500, (260,))), True),
    "where_rows": (lambda x, i: torch.where(i > 3, x, x.mean(-1, keepdim=True))
                   / (x.abs().sum(-1, keepdim=True) + 1),
                   lambda: (randn((260, 130)), torch.randint(0, 9, (260, 1), dtype=torch.int32)), True),
}


@pytest.mark.parametrize("target", ["trn1", "trn2"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_documented_forms(name, target, tmp_path):
    fn, args, grad = PROGRAMS[name]
    check_cases(fn, [args()], grad=grad, target=target, debug_dir=str(tmp_path))
    irs = list(Path(tmp_path).rglob("ir.txt"))
    assert irs
    bad = [f for p in irs for f in _findings(p.read_text(), target)]
    assert not bad, "\n".join(bad[:20])


def test_rotary_positions_match_eager_closely():
    """sin/cos of angles up to 8192 rad: range reduction keeps fp32 accuracy (ScalarE sin is only
    valid on [-pi, pi]; an unreduced argument or x + pi/2 rounded before the reduction is off by
    ~1e-3 there)."""
    pos = torch.arange(0, 8193, dtype=torch.float32)
    check_cases(lambda p: (torch.sin(p), torch.cos(p), torch.sin(-p * 0.7), torch.cos(p * math.pi)),
                [(pos,)], atol=2e-6, rtol=0)
