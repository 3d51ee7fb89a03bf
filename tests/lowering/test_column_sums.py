"""Column sums and partition broadcasts on TensorE inside fused kernels (lowering/partition_ops.py).

A norm's weight/bias gradient (a sum over rows) is accumulated across row tiles with ones-vector
matmuls in the same pass as dX; leaves constant along the rows (a norm's weight) are read once and
broadcast across partitions on TensorE. Numerics against eager on shapes that are ragged (rows not a
multiple of 128, columns not of 512), 3-D, and wide enough that two column sums no longer fit the
PSUM banks (the SBUF-accumulator path)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from _compare import FP32, check
from neuron_inductor.runtime.sim import counters, reset_counters


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def layernorm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


@pytest.mark.parametrize("shape", [(300, 640), (1, 130), (2, 70, 96)])
def test_rmsnorm_backward_with_column_sum(shape):
    torch.manual_seed(0)
    check(rmsnorm, torch.randn(shape), torch.randn(shape[-1]), grad=True, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("shape", [(260, 96), (130, 2100)])
def test_layernorm_weight_and_bias_grads(shape):
    """(130, 2100): two column sums of 5 PSUM banks each accumulate in SBUF instead."""
    torch.manual_seed(0)
    check(layernorm, torch.randn(shape), torch.randn(shape[-1]), torch.randn(shape[-1]), grad=True,
          atol=2e-4, rtol=1e-4)


def test_lone_column_sum_reads_rows_contiguously():
    """sum over the leading axis: row tiles summed on TensorE, not a transposed element-wise read."""
    torch.manual_seed(0)
    x = torch.randn(300, 700)
    reset_counters()
    check(lambda t: t.sum(0), x)
    c = counters()
    assert c.instructions.get("tensor", 0) > 0
    assert c.dma_bytes_loaded == x.numel() * 4


def test_bf16_column_sum():
    torch.manual_seed(0)
    x = torch.randn(260, 300, dtype=torch.bfloat16)
    check(lambda t: t.sum(0), x)
