"""A GEMM whose lhs a fused group computes (``lowering/matmul/prologue.py``, folded by
``graph/prologue_absorb.py``): an RMSNorm and the projection after it as one kernel on trn1 fp32.
Numerics on the simulator (which refuses a TensorE transpose of non-finite data on trn1) against
eager: NaN and +-Inf rows stay in their rows, ragged M/K/N, forward and backward; bf16 and trn2
keep the two kernels. The modelled figures check NKIBench's rmsnorm_matmul shape (deterministic
cost model, not timed).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from neuron_inductor import pipeline
from neuron_inductor.config import get_config
from neuron_inductor.costmodel import estimate_program
from neuron_inductor.graph.decompositions import decomposition_table
from neuron_inductor.graph.passes import run_passes
from neuron_inductor.lowering.matmul import prologue
from neuron_inductor.target import get_target

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _ops import check_cases, randn  # noqa: E402

F32, BF16 = torch.float32, torch.bfloat16


def _rmsnorm_matmul(x, w):
    return (x / torch.sqrt((x * x / x.shape[-1]).sum(-1, keepdim=True))) @ w


def _add_rmsnorm_matmul(x, z, g, w):
    y = x + z
    t = (y * y / y.shape[-1]).sum(-1, keepdim=True) + 1e-5
    return (y / torch.sqrt(t) * g) @ w


@pytest.fixture
def fused(monkeypatch):
    """The (M, K, N) of every GEMM lowered with its lhs's fused group."""
    seen: list = []
    real = prologue.lower_matmul_prologue

    def spy(group, *a, **k):
        real(group, *a, **k)
        mm = next(n for n in group.nodes if n.target is torch.ops.aten.mm.default)
        M, K = mm.args[0].meta["val"].shape
        seen.append((int(M), int(K), int(mm.meta["val"].shape[1])))
    monkeypatch.setattr(prologue, "lower_matmul_prologue", spy)
    return seen


def _nonfinite_rows(x: torch.Tensor, rows: tuple[int, int, int]) -> torch.Tensor:
    x = x.clone()
    x[rows[0], 7], x[rows[1], 11], x[rows[2], 0] = float("nan"), float("inf"), float("-inf")
    return x


@pytest.mark.parametrize("shape", [(256, 256, 1024), (200, 300, 130)], ids=["aligned", "ragged"])
def test_fused_norm_gemm_matches_eager_with_nonfinite_rows(fused, shape):
    M, K, N = shape
    x = _nonfinite_rows(randn((M, K), seed=1), (3, 130, 131))
    z, g, w = randn((M, K), seed=2), randn((K,), seed=3), randn((K, N), seed=4) * 0.05
    outs = check_cases(_rmsnorm_matmul, [(x, w)], atol=1e-4, rtol=1e-4, target="trn1")
    outs += check_cases(_add_rmsnorm_matmul, [(x, z, g, w)], atol=1e-4, rtol=1e-4, target="trn1")
    assert fused.count((M, K, N)) == 2
    for out in outs:  # the NaN / Inf rows are NaN; no other row is touched
        assert (~out.isfinite().all(-1)).nonzero().flatten().tolist() == [3, 130, 131]


def test_fused_norm_gemm_backward_matches_eager(fused):
    x, z = randn((200, 300), seed=5), randn((200, 300), seed=6)
    g, w = randn((300,), seed=7), randn((300, 130), seed=8) * 0.05
    check_cases(_add_rmsnorm_matmul, [(x, z, g, w)], grad=True,
                atol=1e-4, rtol=1e-4, target="trn1")
    assert (200, 300, 130) in fused


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_two_kernels_where_the_fused_lhs_does_not_apply(fused, target):
    # bf16 (the lhs rounds on its store) and trn2 (exact TensorE transposes) keep the two kernels
    x, w = randn((256, 256), BF16, seed=9), (randn((256, 512), seed=10) * 0.05).to(BF16)
    x32, w32 = randn((256, 256), seed=11), randn((256, 512), seed=12) * 0.05
    cases = [(x, w)] + ([(x32, w32)] if target == "trn2" else [])
    check_cases(_rmsnorm_matmul, cases, target=target, atol=1e-4, rtol=1e-4)
    assert fused == []


def _kernels(fn, shapes, target: str):
    args = [torch.empty(s, dtype=F32, device="meta") for s in shapes]
    gm = make_fx(lambda *a: (fn(*a),), decomposition_table=decomposition_table(), tracing_mode="fake")(*args)
    lg = pipeline.partition_and_lower(run_passes(gm), get_config().replace(target=target, cache=False), "pro")
    return lg.program.kernels


def test_norm_and_gemm_are_one_tensor_bound_kernel_on_trn1():
    # NKIBench rmsnorm_matmul (4096 x 1024 @ 1024 x 2048 fp32): was a norm kernel writing the
    # normalized rows (0.20 ms) and a GEMM reading them back; one kernel reads x and w once
    (k,) = _kernels(_rmsnorm_matmul, [(4096, 1024), (1024, 2048)], "trn1")
    assert "per row tile of its lhs" in k.plan
    cost = estimate_program([k], get_target("trn1")).kernels[0]
    assert cost.seconds <= 1.1 * cost.busy_s["tensor"]
    assert cost.hbm_bytes <= 1.01 * (4096 * 1024 + 1024 * 2048 + 4096 * 2048) * 4


def test_long_rows_and_a_wide_rhs(fused):
    # K = 2200 (longer than the 2048-element free chunk; ragged last k tile): the norm's single pass
    # holds whole rows, so it still joins the GEMM. N = 12800: the resident rhs would take more than
    # half of SBUF, so the lowering refuses the fold and lowers the two groups on their own. Both
    # stay exact with an Inf row.
    x = randn((130, 2200), seed=13)
    x[129, 5] = float("inf")
    w = randn((2200, 40), seed=14) * 0.05
    x2, w2 = randn((130, 256), seed=15), randn((256, 12800), seed=16) * 0.05
    x2[0, 3] = float("nan")
    outs = check_cases(_rmsnorm_matmul, [(x, w), (x2, w2)], atol=1e-4, rtol=1e-4, target="trn1")
    assert fused == [(130, 2200, 40)]
    assert [(~o.isfinite().all(-1)).nonzero().flatten().tolist() for o in outs] == [[129], [0]]
