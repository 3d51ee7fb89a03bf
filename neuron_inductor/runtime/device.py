"""The device path: generated ``@nki.jit`` kernels called on ``neuron`` tensors through TorchNeuron.

The contract followed (Neuron docs: "How to work with NKI kernels from torch-neuronx", "What is
TorchNeuron?", and the ``nki.jit`` docstring of ``nki/api/nki/__init__.py``):

* TorchNeuron registers the ``neuron`` device through PyTorch's PrivateUse1 mechanism. A compiled
  graph's inputs, parameters and outputs live there, and every kernel is called with those tensors
  as they are: ``nki.jit`` detects the PyTorch framework from ``torch.Tensor`` arguments, compiles
  the kernel for the shapes, dtypes and non-tensor values of the first call and reuses it after;
  outputs are allocated by the kernel as ``nl.shared_hbm`` arrays and come back as ``neuron``
  tensors. Nothing moves to the host and back: an argument that is not a ``neuron`` tensor is a
  :class:`DeviceContractError` (it would be a compiler bug, not a user error).
* A parameter the kernel writes is written in the caller's device tensor (the kernel returns it);
  when TorchNeuron hands back another tensor for it, the value is copied device-to-device into the
  caller's tensor, which is returned (as the simulator does).
* The compile target is the one the kernel module records (``PLATFORM_TARGET``), passed as
  ``NEURON_PLATFORM_TARGET_OVERRIDE`` (``trn1`` / ``trn2`` / ``trn3``); a different value already set
  is an error, never a silent recompile for other hardware.
* Logical cores: our kernels are single-NeuronCore kernels (no ``nl.program_id`` sharding), so they
  launch as ``kernel[1]``, which the ``nki.jit`` docs require to equal the runtime's
  ``NEURON_LOGICAL_NC_CONFIG``; trn2 and trn3 default to LNC=2, so the runtime must be configured
  with ``NEURON_LOGICAL_NC_CONFIG=1`` (anything else is refused with that instruction).
* A kernel without parameters gives the framework nothing to detect: it is traced through a
  one-argument shim and launched with a 1-element int32 tensor allocated on the device.
* 64-bit tensors are refused: NKI has no 64-bit dtype (``nki.api.shared.rst`` ``tbl-dtype``); the host
  wrapper reinterprets int64 as int32 words before the call.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable

from neuron_inductor.target import KERNEL_TARGET_NAME

TARGET_ENV = "NEURON_PLATFORM_TARGET_OVERRIDE"
LNC_ENV = "NEURON_LOGICAL_NC_CONFIG"
DEVICE_TYPE = "neuron"
#: the logical-core degree our kernels are written for
KERNEL_LNC = 1
_WIDE = ("torch.int64", "torch.float64", "torch.uint64", "torch.complex64", "torch.complex128")
#: targets whose runtime defaults to two logical cores per NeuronCore pair
_LNC2_DEFAULT = ("trn2", "trn3")


class DeviceContractError(RuntimeError):
    """A call that would break the documented TorchNeuron / NKI device contract."""


def runtime_lnc(target: str | None) -> int:
    """The runtime's logical-core degree: ``NEURON_LOGICAL_NC_CONFIG``, else the target's default
    (trn2 / trn3: 2, trn1: 1)."""
    v = os.environ.get(LNC_ENV)
    if v:
        return int(v)
    return 2 if target in _LNC2_DEFAULT else 1


class DeviceKernel:
    """One generated kernel on the device; calling it follows the contract in the module docstring."""

    def __init__(self, real_nki: Any, fn: Callable, options: dict) -> None:
        self.fn = fn
        self.target = getattr(fn, "__globals__", {}).get(KERNEL_TARGET_NAME)
        self.n_params = fn.__code__.co_argcount
        body = fn
        if self.n_params == 0:
            def _anchored(_anchor):  # the framework is detected from this argument
                return fn()
            _anchored.__name__ = fn.__name__
            body = _anchored
        self.kernel = real_nki.jit(body, **options)
        self.__name__ = fn.__name__
        self.returned_params = _returned_params(fn)

    def _target_env(self) -> None:
        if self.target is None:
            return
        have = os.environ.get(TARGET_ENV)
        if have and have != self.target:
            raise DeviceContractError(f"kernel {self.__name__} was compiled for {self.target}, but "
                                      f"{TARGET_ENV}={have}")
        os.environ[TARGET_ENV] = self.target

    def _check(self, args: tuple) -> None:
        import torch

        lnc = runtime_lnc(self.target)
        if lnc != KERNEL_LNC:
            raise DeviceContractError(f"{LNC_ENV}={lnc}: generated kernels are single-NeuronCore kernels "
                                      f"launched as kernel[{KERNEL_LNC}]; set {LNC_ENV}={KERNEL_LNC} for the "
                                      "Neuron runtime (trn2 and trn3 default to 2)")
        if len(args) != self.n_params:
            raise DeviceContractError(f"kernel {self.__name__} takes {self.n_params} argument(s), got {len(args)}")
        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                raise DeviceContractError(f"kernel {self.__name__} argument {i}: {type(a).__name__}; the "
                                          "device path passes torch tensors only")
            if a.device.type != DEVICE_TYPE:
                raise DeviceContractError(f"kernel {self.__name__} argument {i} is on {a.device}, not on the "
                                          f"{DEVICE_TYPE} device: the device path never hands a kernel a "
                                          "host tensor (a compiler bug; please report it)")
            if str(a.dtype) in _WIDE:
                raise DeviceContractError(f"kernel {self.__name__} argument {i} is {a.dtype}; NKI has no "
                                          "64-bit dtypes (the host wrapper narrows values first)")

    def __call__(self, *args: Any) -> Any:
        import torch

        self._target_env()
        self._check(args)
        call_args = list(args)
        if self.n_params == 0:
            call_args = [torch.zeros(1, dtype=torch.int32, device=DEVICE_TYPE)]
        result = self.kernel[KERNEL_LNC](*call_args)
        return _land(result, args, self.returned_params)


def _returned_params(fn: Callable) -> dict[int, int]:
    """``{position in the returned tuple: parameter index}`` for the parameters ``fn`` returns (the
    buffers it wrote), read from its last ``return`` statement; empty when the source is unavailable."""
    import ast
    import inspect
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return {}
    params = [a.arg for a in tree.body[0].args.args] if tree.body and isinstance(
        tree.body[0], ast.FunctionDef) else []
    rets = [n for n in ast.walk(tree) if isinstance(n, ast.Return) and n.value is not None]
    if not rets:
        return {}
    value = rets[-1].value
    elts = value.elts if isinstance(value, ast.Tuple) else [value]
    return {i: params.index(e.id) for i, e in enumerate(elts)
            if isinstance(e, ast.Name) and e.id in params}


def _land(result: Any, args: tuple, returned: dict[int, int]) -> Any:
    """A returned parameter is the caller's device tensor: when the runtime hands back another
    tensor for it, its values are copied into the caller's (device to device) and that is returned."""
    import torch

    many = isinstance(result, (tuple, list))
    items = list(result) if many else [result]
    for i, p in returned.items():
        if i < len(items) and isinstance(items[i], torch.Tensor) and items[i] is not args[p]:
            if items[i].untyped_storage().data_ptr() != args[p].untyped_storage().data_ptr():
                args[p].copy_(items[i].reshape(args[p].shape))
            items[i] = args[p]
    if many:
        return type(result)(items)
    return items[0]


class DeviceNki:
    """The ``nki`` namespace generated kernel modules see on the device path."""

    def __init__(self, real_nki: Any) -> None:
        self.real = real_nki
        self.language = sys.modules.get(f"{real_nki.__name__}.language")
        self.isa = sys.modules.get(f"{real_nki.__name__}.isa")
        self.is_simulator = False

    def jit(self, fn: Callable | None = None, **options: Any) -> Any:
        if fn is None:
            return lambda f: DeviceKernel(self.real, f, options)
        return DeviceKernel(self.real, fn, options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)
