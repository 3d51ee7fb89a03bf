"""The device path: generated ``@nki.jit`` kernels on a real NeuronCore through NKI 0.3+.

How a kernel reaches the hardware (``nki/api/nki/__init__.py`` ``jit``: the framework is chosen from
the argument types; ``torch.Tensor`` arguments use the PyTorch integration):

* ``nki.jit`` here is :func:`jit`: it wraps each kernel function in a :class:`DeviceKernel` around the
  real ``nki.jit(fn)``;
* a call moves every torch argument to the XLA (Neuron) device (``torch_xla``), launches
  ``kernel[lnc](*args)`` and moves results back to the caller's device; a parameter the kernel
  mutated is copied back into the caller's tensor, which is returned (as the simulator does);
* the compile target is the one the kernel module records (``PLATFORM_TARGET``), passed as
  ``NEURON_PLATFORM_TARGET_OVERRIDE`` (``trn1`` / ``trn2``); a different value already set is an
  error, never a silent recompile for other hardware;
* logical cores: our kernels are single-NeuronCore kernels (no ``nl.program_id`` sharding), so they
  launch as ``kernel[1]``, which the docs require to equal the runtime's ``NEURON_LOGICAL_NC_CONFIG``;
  trn2 defaults to LNC=2, so on trn2 the runtime must be configured with
  ``NEURON_LOGICAL_NC_CONFIG=1`` (anything else is refused with that instruction);
* a kernel without parameters gives the framework nothing to detect: it is traced through a
  one-argument shim that calls it (the NKI tracer inlines calls) and launched with a 1-element int32
  tensor;
* 64-bit tensors are refused: NKI has no 64-bit dtype (``nki.api.shared.rst`` ``tbl-dtype``); the host
  wrapper narrows values before the call, so a 64-bit argument here is a compiler bug.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable

from neuron_inductor.target import KERNEL_TARGET_NAME

TARGET_ENV = "NEURON_PLATFORM_TARGET_OVERRIDE"
LNC_ENV = "NEURON_LOGICAL_NC_CONFIG"
#: the logical-core degree our kernels are written for
KERNEL_LNC = 1
_WIDE = ("torch.int64", "torch.float64", "torch.uint64", "torch.complex64", "torch.complex128")


class DeviceContractError(RuntimeError):
    """A call that would break the documented NKI device contract."""


def runtime_lnc(target: str | None) -> int:
    """The runtime's logical-core degree: ``NEURON_LOGICAL_NC_CONFIG``, else the target's default
    (trn2: 2, trn1: 1)."""
    v = os.environ.get(LNC_ENV)
    if v:
        return int(v)
    return 2 if target == "trn2" else 1


def xla_device() -> Any:
    """The XLA device of the Neuron PyTorch integration (``torch_xla``)."""
    try:
        import torch_xla.core.xla_model as xm
    except ImportError as e:
        raise DeviceContractError("the NKI device path runs torch kernels through torch-neuronx / "
                                  "torch_xla, which is not importable") from e
    return xm.xla_device()


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

    def _target_env(self) -> None:
        if self.target is None:
            return
        have = os.environ.get(TARGET_ENV)
        if have and have != self.target:
            raise DeviceContractError(f"kernel {self.__name__} was compiled for {self.target}, but "
                                      f"{TARGET_ENV}={have}")
        os.environ[TARGET_ENV] = self.target

    def __call__(self, *args: Any) -> Any:
        import torch

        self._target_env()
        lnc = runtime_lnc(self.target)
        if lnc != KERNEL_LNC:
            raise DeviceContractError(f"{LNC_ENV}={lnc}: generated kernels are single-NeuronCore kernels "
                                      f"launched as kernel[{KERNEL_LNC}]; set {LNC_ENV}={KERNEL_LNC} for the "
                                      "Neuron runtime (trn2 defaults to 2)")
        if len(args) != self.n_params:
            raise DeviceContractError(f"kernel {self.__name__} takes {self.n_params} argument(s), got {len(args)}")
        dev = xla_device()
        moved = []
        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                raise DeviceContractError(f"kernel {self.__name__} argument {i}: {type(a).__name__}; the "
                                          "device path passes torch tensors only")
            if str(a.dtype) in _WIDE:
                raise DeviceContractError(f"kernel {self.__name__} argument {i} is {a.dtype}; NKI has no "
                                          "64-bit dtypes (the host wrapper narrows values first)")
            moved.append(a.contiguous().to(dev))
        if self.n_params == 0:
            moved = [torch.zeros(1, dtype=torch.int32).to(dev)]
        result = self.kernel[KERNEL_LNC](*moved)
        return _back(result, args, moved)


def _back(result: Any, originals: tuple, moved: list) -> Any:
    """Results on the caller's side: a returned (mutated) parameter is copied into the caller's
    tensor and that tensor returned; new outputs move to the first argument's device (CPU)."""
    import torch

    if isinstance(result, (tuple, list)):
        return type(result)(_back(r, originals, moved) for r in result)
    if not isinstance(result, torch.Tensor):
        return result
    for orig, m in zip(originals, moved):
        if result is m:
            orig.copy_(m.to(orig.device))
            return orig
    home = originals[0].device if originals else torch.device("cpu")
    return result.to(home)


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
