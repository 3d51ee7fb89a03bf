"""Stand-in for TorchNeuron (``torch_neuronx``) in the contract tests: test-only, never shipped.

On import it does what the docs say TorchNeuron does ("What is TorchNeuron?", "torch.neuron and
torch.accelerator reference"): registers the ``neuron`` PrivateUse1 device with a ``torch.neuron``
module (``_device.py``). It also provides the NKI custom-op entry points of "How to work with NKI
kernels from torch-neuronx": ``nki_op`` (a ``torch.library`` custom op whose body calls an
``@nki.jit`` kernel, the body also serving as its fake implementation: ``nki.jit`` returns fake
outputs under fake tensors) and ``wrap_nki`` (``nki_hop.py``: ``wrap_nki(kernel)[grid](...)``
traced as the higher-order op ``nki_kernel_wrapper``).
"""
from __future__ import annotations

import torch

from . import _device
from ._device import COPIES, reset_copies  # noqa: F401

_device.install()

__version__ = "2.14.0+standin"


def nki_op(name: str, fn=None, *, mutates_args=(), device_types=None, schema=None):
    """``@nki_op("ns::name", mutates_args=...)``: the launcher ``fn`` as a custom op."""
    def register(f):
        op = torch.library.custom_op(name, f, mutates_args=mutates_args, device_types=device_types,
                                     schema=schema)
        op.register_fake(f)
        return op
    return register if fn is None else register(fn)


def __getattr__(name: str):
    if name == "wrap_nki":
        from .nki_hop import wrap_nki
        return wrap_nki
    raise AttributeError(name)
