"""Kernel outputs returned to torch callers are ordinary torch tensors with resizable storage."""
import torch

from neuron_inductor.runtime.sim import nisa, nki, nl


@nki.jit
def _double(x):
    out = nl.ndarray((8,), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((1, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[0:1, 0:8], src=x.ap(pattern=[[8, 1], [1, 8]], offset=0))
    nisa.tensor_scalar(dst=t[0:1, 0:8], data=t[0:1, 0:8], op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out.ap(pattern=[[8, 1], [1, 8]], offset=0), src=t[0:1, 0:8])
    return out


@nki.jit
def _to_bf16(x):
    out = nl.ndarray((8,), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.ndarray((1, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[0:1, 0:8], src=x.ap(pattern=[[8, 1], [1, 8]], offset=0))
    nisa.dma_copy(dst=out.ap(pattern=[[8, 1], [1, 8]], offset=0), src=t[0:1, 0:8])
    return out


def test_output_storage_is_resizable_like_any_torch_tensor():
    """FSDP2 frees parameters with ``untyped_storage().resize_(0)``; memory borrowed from numpy
    refuses that ("Trying to resize storage that is not resizable")."""
    out = _double(torch.arange(8, dtype=torch.float32))
    torch.testing.assert_close(out, 2 * torch.arange(8, dtype=torch.float32))
    out.untyped_storage().resize_(0)
    assert out.untyped_storage().nbytes() == 0


def test_bf16_output_is_torch_owned():
    out = _to_bf16(torch.linspace(-1, 1, 8))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, torch.linspace(-1, 1, 8).bfloat16())
    out.untyped_storage().resize_(0)
