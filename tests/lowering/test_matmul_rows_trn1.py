"""trn1 fp32/bf16 GEMMs whose lhs is row-major (``kstream.emit_rhs_resident(lhs_rows=True)``): the
rhs stays resident and each row tile's rows are transposed on VectorE (exact with NaN/Inf, which the
trn1 TensorE transpose is not) in its own pipelined iteration, overlapping the previous row tiles'
matmuls. Numerics on the simulator (which refuses a TensorE transpose of non-finite data on trn1)
against eager, with a NaN row and +-Inf rows that must not spread; the modelled figures check the
overlap on NKIBench's rmsnorm_matmul shape (deterministic cost model, not timed).
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
from neuron_inductor.ir.printer import format_kernel
from neuron_inductor.lowering.matmul import kstream
from neuron_inductor.target import get_target

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _ops import check_cases, randn  # noqa: E402

F32, BF16 = torch.float32, torch.bfloat16


def _rmsnorm_matmul(x, w):
    return (x / torch.sqrt((x * x / x.shape[-1]).sum(-1, keepdim=True))) @ w


def _with_nonfinite(x: torch.Tensor) -> torch.Tensor:
    """A NaN in row 3, +Inf in row 130 and -Inf in row 131 (two row tiles, two 32-row blocks)."""
    x = x.clone()
    x[3, 7], x[130, 200], x[131, 0] = float("nan"), float("inf"), float("-inf")
    return x


@pytest.fixture
def chosen(monkeypatch):
    """The (M, N, K) of every GEMM that took the row-transposed plan."""
    seen: list = []
    real = kstream.prefer_rows_transposed

    def spy(M, N, K, *a):
        ok = real(M, N, K, *a)
        if ok:
            seen.append((M, N, K))
        return ok
    monkeypatch.setattr(kstream, "prefer_rows_transposed", spy)
    return seen


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_rows_transposed_matches_eager_with_nonfinite_rows(chosen, dtype):
    # w scaled so outputs stay near 1, where a bf16 ulp is within the dtype's tolerance
    x, w = _with_nonfinite(randn((256, 256), dtype, seed=1)), (randn((256, 1024), seed=2) * 0.05).to(dtype)
    got = check_cases(lambda x, w: (_rmsnorm_matmul(x, w), x @ w), [(x, w)], atol=1e-4, rtol=1e-4,
                      target="trn1")
    assert (256, 1024, 256) in chosen
    for out in got:  # the rows holding NaN / Inf are NaN / non-finite; no other row is touched
        bad = ~out.float().isfinite().all(-1)
        assert bad.nonzero().flatten().tolist() == [3, 130, 131]


def test_rows_transposed_backward_matches_eager(chosen):
    x, w = randn((256, 384), seed=3), randn((384, 512), seed=4) * 0.1
    check_cases(lambda x, w: _rmsnorm_matmul(x, w).tanh(), [(x, w)], grad=True, atol=1e-4, rtol=1e-4,
                target="trn1")
    assert (256, 512, 384) in chosen


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_ragged_gemm_on_trn1_keeps_exact_transposes(chosen, dtype):
    # 200 x 300 @ 300 x 130: ragged M, K and N keep the resident-lhs plan (also VectorE blocks)
    x, w = randn((200, 300), dtype, seed=5), (randn((300, 130), seed=6) * 0.05).to(dtype)
    x[7, 11], x[150, 0], x[151, 299] = float("nan"), float("inf"), float("-inf")
    check_cases(lambda x, w: _rmsnorm_matmul(x, w), [(x, w)], grad=False, atol=1e-4, rtol=1e-4,
                target="trn1")
    assert chosen == []
    x2, w2 = randn((200, 300), dtype, seed=7), (randn((300, 130), seed=8) * 0.05).to(dtype)
    # backward in fp32 (bf16 dW sums 200 products of O(1) values: its ulp exceeds the tolerance)
    check_cases(lambda x, w: _rmsnorm_matmul(x, w), [(x2, w2)], grad=dtype == F32, atol=1e-4, rtol=1e-4,
                target="trn1")


def _mm_kernel(fn, shapes, target: str):
    args = [torch.empty(s, dtype=F32, device="meta") for s in shapes]
    gm = make_fx(lambda *a: (fn(*a),), decomposition_table=decomposition_table(), tracing_mode="fake")(*args)
    lg = pipeline.partition_and_lower(run_passes(gm), get_config().replace(target=target, cache=False), "rows")
    (k,) = [k for k in lg.program.kernels if k.name.endswith("_mm")]
    return k


def test_transposes_overlap_matmuls_on_trn1():
    # NKIBench rmsnorm_matmul's GEMM shape (4096 x 1024 @ 1024 x 2048 fp32): the resident-lhs plan
    # ran 0.46 ms of VectorE transposes before 0.87 ms of matmuls (1.333 ms); overlapped it is
    # TensorE-bound (the norm itself now joins the GEMM: test_matmul_prologue.py)
    k = _mm_kernel(lambda x, w: x @ w, [(4096, 1024), (1024, 2048)], "trn1")
    assert "lhs rows transposed on VectorE one row tile per iteration" in k.plan
    cost = estimate_program([k], get_target("trn1")).kernels[0]
    assert cost.seconds <= 1.1 * cost.busy_s["tensor"]
    assert cost.hbm_bytes <= 1.01 * cost.min_hbm_bytes
    # VectorE transposes, ScalarE evicts the PSUM tiles (swiglu's down projection was VectorE-bound)
    text = format_kernel(k)
    assert "vector.tensor_copy" not in text and "scalar.activation" in text


def test_exact_tensor_transposes_keep_their_plan():
    # trn2 transposes on TensorE exactly: the plan above is for VectorE transposes only
    k = _mm_kernel(lambda x, w: x @ w, [(4096, 1024), (1024, 2048)], "trn2")
    assert "one row tile per iteration" not in k.plan
