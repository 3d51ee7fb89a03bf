"""Stand-in NKI 0.3+ package (``nki``) for the device-path contract tests: never a real compiler.

``nki.jit`` follows the documented contract of the real one (``nki/api/nki/__init__.py`` ``jit``;
Neuron docs "How to work with NKI kernels from torch-neuronx"): it wraps a plain function; the
framework is detected from the arguments (torch tensors: PyTorch), which must all be on the
``neuron`` device; a kernel is compiled for the shapes, dtypes and non-tensor values of its first
call and reused after (``Kernel.compiles`` counts them); ``kernel[lnc]`` must equal
``NEURON_LOGICAL_NC_CONFIG``; ``NEURON_PLATFORM_TARGET_OVERRIDE`` names a known target; NKI has no
64-bit dtypes. "Running on the device" is our simulator executing the kernel on the device
tensors' bytes: outputs (``nl.shared_hbm``, allocated by the kernel) come back as ``neuron``
tensors, and a parameter the kernel writes is the caller's device tensor. Under a fake-tensor mode
(torch.compile tracing an ``nki_op``) a call returns fake outputs of the right shapes, as
TorchNeuron's ``nki.jit`` does.
"""
from __future__ import annotations

import os
import sys
import types

import torch

from neuron_inductor.runtime import sim

sys.modules.setdefault("nki.language", sim.nl)
sys.modules.setdefault("nki.isa", sim.nisa)
language = sim.nl
isa = sim.nisa

TARGETS = {"trn1", "inf2", "gen2", "trn2", "gen3", "trn3", "gen4"}
kernels: list = []  # every Kernel made, for tests to inspect


class ContractViolation(AssertionError):
    """A call the real NKI / TorchNeuron would refuse."""


def _device():
    import torch_neuronx._device as dev  # the stand-in device this package runs on
    return dev


class Kernel:
    def __init__(self, fn, **options) -> None:
        if not isinstance(fn, types.FunctionType):
            raise ContractViolation(f"nki.jit wraps a plain function, got {type(fn).__name__}")
        self.fn = fn
        self.func = fn
        self.options = options
        self.compiles: dict = {}  # signature -> calls; a new signature is one compile
        self.launches: list = []
        self._sim = sim.jit(fn)

    def __getitem__(self, lnc):
        want = int(os.environ.get("NEURON_LOGICAL_NC_CONFIG", "1"))
        if lnc != want:
            raise ContractViolation(f"kernel[{lnc}] must equal NEURON_LOGICAL_NC_CONFIG={want}")
        return lambda *args: self._launch(lnc, args)

    def __call__(self, *args):
        return self[int(os.environ.get("NEURON_LOGICAL_NC_CONFIG", "1"))](*args)

    def _launch(self, lnc, args):
        from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

        if os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2") not in TARGETS:
            raise ContractViolation("NEURON_PLATFORM_TARGET_OVERRIDE must name a known target")
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not tensors:
            raise ContractViolation(f"{self.fn.__name__}: no tensor argument, the framework cannot be "
                                    "detected")
        dev = _device()
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                if a.device.type != dev.NAME:
                    raise ContractViolation(f"{self.fn.__name__} argument {i} is a {a.device} tensor: "
                                            "kernels take tensors on the neuron device")
                if a.dtype in (torch.int64, torch.float64, torch.uint64):
                    raise ContractViolation(f"{a.dtype} has no NKI dtype")
        if any(isinstance(a, FakeTensor) for a in args):
            with unset_fake_temporarily():  # shapes of the outputs: run on zeros of the same shapes
                real = [torch.zeros(a.shape, dtype=a.dtype) if isinstance(a, torch.Tensor) else a
                        for a in args]
                out = self._sim(*real)
            return _fake_like(out, args, real)
        sig = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)
        self.compiles[sig] = self.compiles.get(sig, 0) + 1
        self.launches.append((lnc, os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE")))
        raws = [dev.raw(a).contiguous() if isinstance(a, torch.Tensor) else a for a in args]
        for a, r in zip(args, raws):
            if isinstance(a, torch.Tensor) and not dev.raw(a).is_contiguous():
                raise ContractViolation("the stand-in passes dense device tensors only")
        out = self._sim(*raws)
        return _on_device(out, args, raws, dev)


def _on_device(out, args, raws, dev):
    if isinstance(out, (tuple, list)):
        return type(out)(_on_device(o, args, raws, dev) for o in out)
    for a, r in zip(args, raws):
        if out is r:
            return a
    if isinstance(out, torch.Tensor):
        return dev.wrap(out)
    if hasattr(out, "dtype") and hasattr(out, "shape"):  # numpy
        return dev.wrap(torch.from_numpy(out))
    return out


def _fake_like(out, args, real):
    if isinstance(out, (tuple, list)):
        return type(out)(_fake_like(o, args, real) for o in out)
    for a, r in zip(args, real):
        if out is r:
            return a
    if isinstance(out, torch.Tensor):
        like = next(a for a in args if isinstance(a, torch.Tensor))
        return like.new_empty(out.shape, dtype=out.dtype)
    return out


def jit(fn=None, **options):
    if fn is None:
        return lambda f: jit(f, **options)
    k = Kernel(fn, **options)
    kernels.append(k)
    return k
