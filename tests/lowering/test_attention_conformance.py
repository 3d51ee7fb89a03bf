"""The flash kernels' instructions obey the documented NKI rules (aws-neuron-sdk
``nki/api/nki/isa/__init__.py`` docstrings, ``nki.api.shared.rst`` tables; docs/nki-rules.md),
for fp32 and bf16, causal / bool / float masks, on trn1 and trn2, checked on the lowered tile IR:

- ``divide`` is not an engine ALU op (reciprocal, then multiply);
- a TensorE ``nc_transpose`` writes a PSUM tile of its input's dtype;
- comparisons, subtract, maximum / minimum and logical ops run on VectorE, never GpSimd;
- ``tensor_copy`` never runs on ScalarE (not supported on NeuronCore-v2; ``activation(copy)`` is);
- ``tensor_scalar`` operands are float32 (tiles) or float literals, ``memset`` values of float tiles
  are float literals, activation biases are float32 tiles.
"""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from neuron_inductor import pipeline
from neuron_inductor.config import get_config
from neuron_inductor.ir import Instr, TileRegion
from neuron_inductor.ir.nodes import walk

aten = torch.ops.aten
VECTOR_ONLY = {"subtract", "maximum", "minimum", "equal", "not_equal", "greater", "greater_equal", "less",
               "less_equal", "logical_and", "logical_or", "logical_xor"}


def _kernels(dtype, mask: str, causal: bool, target: str, seq: int = 300):
    def fwd(q, k, v, m):
        return aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, causal, attn_mask=m)

    def bwd(go, q, k, v, o, lse, m):
        return aten._scaled_dot_product_flash_attention_for_cpu_backward.default(
            go, q, k, v, o, lse, 0.0, causal, attn_mask=m)
    with FakeTensorMode():
        t = [torch.empty(2, 2, seq, 64, dtype=dtype) for _ in range(5)]
        lse = torch.empty(2, 2, seq, dtype=torch.float32)
        m = None if mask == "none" else torch.empty(2, 1, seq, seq, dtype=torch.bool if mask == "bool" else dtype)
        gf = make_fx(fwd)(*t[:3], m)
        gb = make_fx(bwd)(*t[:5], lse, m)
    cfg = get_config().replace(target=target, cache=False)
    return [k for g in (gf, gb) for k in pipeline.partition_and_lower(g, cfg, "conf").program.kernels]


def _violations(kernels) -> list[str]:
    bad = []
    for k in kernels:
        for s, _ in walk(k.body):
            if not isinstance(s, Instr):
                continue
            ops = {s.attrs.get(a) for a in ("op", "op0", "op1")} - {None}
            where = f"{k.name}: {s.engine}.{s.op}({', '.join(sorted(map(str, ops)))})"
            if "divide" in ops and s.op != "activation":
                bad.append(f"{where}: divide is not an ALU op")
            if s.engine == "gpsimd" and ops & VECTOR_ONLY:
                bad.append(f"{where}: VectorE-only op on GpSimd")
            if s.op == "tensor_copy" and s.engine == "scalar":
                bad.append(f"{where}: tensor_copy on ScalarE")
            if s.op == "nc_transpose" and s.engine == "tensor" and s.dst.dtype != s.srcs["data"].dtype:
                bad.append(f"{where}: transpose {s.srcs['data'].dtype} -> {s.dst.dtype} PSUM")
            if s.op == "tensor_scalar":
                for name in ("operand0", "operand1"):
                    x = s.srcs.get(name, s.attrs.get(name))
                    if isinstance(x, TileRegion) and x.dtype != "float32":
                        bad.append(f"{where}: {name} tile is {x.dtype}")
                    elif x is not None and not isinstance(x, (TileRegion, float)):
                        bad.append(f"{where}: {name} literal {x!r} is not a float")
            if s.op == "memset" and "int" not in s.dst.dtype:
                v = s.srcs.get("value", s.attrs.get("value"))
                if not isinstance(v, float):
                    bad.append(f"{where}: memset value {v!r} into a {s.dst.dtype} tile")
            if s.op == "activation" and isinstance(s.srcs.get("bias"), TileRegion) \
                    and s.srcs["bias"].dtype != "float32":
                bad.append(f"{where}: bias tile is {s.srcs['bias'].dtype}")
    return bad


@pytest.mark.parametrize("target", ["trn1", "trn2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mask,causal", [("none", True), ("none", False), ("bool", True), ("float", False)])
def test_flash_kernels_follow_nki_rules(mask, causal, dtype, target):
    kernels = _kernels(dtype, mask, causal, target)
    assert len(kernels) == 2
    assert _violations(kernels) == []


def test_grouped_row_loads_follow_nki_rules():
    """Lengths that are multiples of 512 take the four-rows-per-partition loads."""
    assert _violations(_kernels(torch.bfloat16, "none", True, "trn1", seq=1024)) == []
