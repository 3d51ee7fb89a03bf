"""An NKI kernel registered the TorchNeuron way (``torch_neuronx.nki_op``), as a user writes it
following "How to work with NKI kernels from torch-neuronx": the op's body launches the kernel on
its ``neuron`` tensors; the backward is registered on the op and launches the same kernel."""
from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl
import torch
from torch import Tensor
from torch_neuronx import nki_op


@nki.jit
def mul_kernel(a, b):
    R, C = a.shape
    out = nl.ndarray((R, C), dtype=a.dtype, buffer=nl.shared_hbm)
    ta = nl.ndarray((R, C), dtype=nl.float32, buffer=nl.sbuf)
    tb = nl.ndarray((R, C), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=ta[0:R, 0:C], src=a[0:R, 0:C])
    nisa.dma_copy(dst=tb[0:R, 0:C], src=b[0:R, 0:C])
    nisa.tensor_tensor(dst=ta[0:R, 0:C], data1=ta[0:R, 0:C], data2=tb[0:R, 0:C], op=nl.multiply)
    nisa.dma_copy(dst=out[0:R, 0:C], src=ta[0:R, 0:C])
    return out


@nki_op("standin_nki::mul", mutates_args=())
def nki_mul(a: Tensor, b: Tensor) -> Tensor:
    return mul_kernel(a, b)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad):
    a, b = ctx.saved_tensors
    return nki_mul(grad, b), nki_mul(grad, a)


torch.library.register_autograd("standin_nki::mul", _backward, setup_context=_setup)


class WrappedMul(torch.autograd.Function):
    """The same product through ``wrap_nki(kernel)[grid](...)`` (the ``nki_kernel_wrapper``
    higher-order op), with its backward as an autograd.Function."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return _WRAPPED[1](a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return _WRAPPED[1](grad, b), _WRAPPED[1](grad, a)


from torch_neuronx import wrap_nki  # noqa: E402

_WRAPPED = wrap_nki(mul_kernel)
