"""The static conformance check over emitted kernel source: one finding per rule it can see, and
the ``lint`` command over a dump directory."""
from __future__ import annotations

import pytest

from neuron_inductor.cli import main
from neuron_inductor.codegen.conform import KernelConformanceError, check_conformance, conformance_findings

pytestmark = pytest.mark.nonconforming

HEAD = "from neuron_inductor.runtime.nki import nki, nl, nisa\nPLATFORM_TARGET = '{t}'\n\n\n"
KERNEL = '''@nki.jit
def k0(in0):
    """k0.

    Parameters (flat HBM spans):
        in0: float32[128] (input)
    """
    t = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
    u = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
    i = nl.ndarray((16, 8), dtype=nl.int32, buffer=nl.sbuf)
    p = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.psum)
    pb = nl.ndarray((8, 16), dtype=nl.bfloat16, buffer=nl.psum)
    idx = nl.ndarray((16, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=in0.ap(pattern=[[8, 16], [1, 8]], offset=0))
{body}
    return None
'''


def lint(body: str, target: str = "trn2") -> list[str]:
    src = HEAD.format(t=target) + KERNEL.format(body="\n".join("    " + b for b in body.splitlines()))
    return [f.rule for f in conformance_findings(src)]


@pytest.mark.parametrize("rule,body,target", [
    ("alu-op-table", "nisa.tensor_tensor(dst=u, data1=t, data2=t, op=nl.divide)", "trn2"),
    ("alu-op-engine", "nisa.tensor_tensor(dst=u, data1=t, data2=t, op=nl.greater, engine=nisa.gpsimd_engine)", "trn2"),
    ("tensor-scalar-gpsimd-rsqrt", "nisa.tensor_scalar(dst=u, data=t, op0=nl.equal, operand0=1.0, "
     "engine=nisa.gpsimd_engine)", "trn2"),
    ("activation-func-table", "nisa.activation(dst=u, op=nl.cos, data=t)", "trn2"),
    ("transpose-same-dtype", "nisa.nc_transpose(dst=pb, data=t, engine=nisa.tensor_engine)", "trn2"),
    ("tensor-copy-scalar-v2", "nisa.tensor_copy(dst=u, src=t, engine=nisa.scalar_engine)", "trn1"),
    ("memset-literal-type", "nisa.memset(dst=i, value=2.0)", "trn2"),
    ("matmul-accumulate-nonmatmul", "nisa.memset(dst=p, value=0.0)\n"
     "nisa.nc_matmul(dst=p, stationary=t, moving=t, accumulate=True)", "trn2"),
    ("matmul-first-overwrite", "nisa.nc_matmul(dst=p, stationary=t, moving=t, accumulate=True)", "trn2"),
    ("indirect-dma-row-stride", "nisa.dma_copy(dst=t, src=in0.ap(pattern=[[8, 16], [1, 8]], offset=0, "
     "vector_offset=idx, indirect_dim=0))", "trn2"),
    ("tensor-scalar-fp32-operand", "nisa.tensor_scalar(dst=u, data=t, op0=nl.add, operand0=idx)", "trn2"),
    ("tensor-scalar-fp32-operand", "nisa.tensor_scalar(dst=i, data=i, op0=nl.bitwise_or, operand0=idx)", "trn2"),
    ("gpsimd-no-psum", "nisa.memset(dst=p, value=0.0, engine=nisa.gpsimd_engine)", "trn2"),
    ("dtype-known", "x = nl.ndarray((16, 8), dtype=nl.float64, buffer=nl.sbuf)", "trn2"),
    ("instr-known", "nisa.tensor_divide(dst=u, data=t)", "trn2"),
])
def test_lint_finds(rule, body, target):
    assert rule in lint(body, target)


def test_shaped_parameter_gives_the_indirect_row_stride():
    src = HEAD.format(t="trn2") + KERNEL.format(body="    nisa.dma_copy(dst=t, src=in0.ap(pattern=[[8, 16], [1, 8]], "
                                                     "offset=0, vector_offset=idx, indirect_dim=0))")
    assert [f.rule for f in conformance_findings(src)] == ["indirect-dma-row-stride"]
    shaped = src.replace("in0: float32[128] (input)", "in0: float32[16, 8] (input)")
    assert conformance_findings(shaped) == []


def test_matmul_overwrite_after_memset_then_accumulate_is_fine():
    assert lint("nisa.memset(dst=p, value=0.0)\n"
                "nisa.nc_matmul(dst=p, stationary=t, moving=t, accumulate=False)\n"
                "nisa.nc_matmul(dst=p, stationary=t, moving=t, accumulate=True)") == []


def test_accumulating_onto_memset_psum_is_allowed_from_v4():
    """nc_matmul note: refused "On NeuronCore-v2 and NeuronCore-v3" only."""
    body = "nisa.memset(dst=p, value=0.0)\nnisa.nc_matmul(dst=p, stationary=t, moving=t, accumulate=True)"
    assert lint(body, "trn3") == []
    assert lint(body, "trn2") == lint(body, "trn1") == ["matmul-accumulate-nonmatmul"]


def test_conforming_kernel_is_clean_and_target_matters():
    ok = "nisa.tensor_copy(dst=u, src=t, engine=nisa.scalar_engine)"
    assert lint(ok, "trn2") == []
    assert lint(ok, "trn1") == ["tensor-copy-scalar-v2"]


def test_check_conformance_raises_with_all_findings():
    src = HEAD.format(t="trn2") + KERNEL.format(body="    nisa.activation(dst=u, op=nl.cos, data=t)\n"
                                                     "    nisa.tensor_tensor(dst=u, data1=t, data2=t, op=nl.divide)")
    with pytest.raises(KernelConformanceError) as info:
        check_conformance(src)
    assert {f.rule for f in info.value.findings} == {"activation-func-table", "alu-op-table"}
    assert "k0:" in str(info.value)


def test_lint_command(tmp_path, capsys):
    good = tmp_path / "g_ok"
    bad = tmp_path / "g_bad"
    good.mkdir()
    bad.mkdir()
    (good / "kernels.py").write_text(HEAD.format(t="trn2") + KERNEL.format(body="    pass"))
    (bad / "kernels.py").write_text(HEAD.format(t="trn2") + KERNEL.format(
        body="    nisa.activation(dst=u, op=nl.cos, data=t)"))
    assert main(["lint", str(good)]) == 0
    assert main(["lint", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "[activation-func-table] 1 finding(s)" in out and "g_bad/kernels.py:k0:" in out
    assert main(["lint", str(tmp_path / "nothing")]) == 2
