"""Where a compiled graph's tensors live while it runs: the host (simulator) or the ``neuron`` device.

On the device path (the kernels module was loaded against TorchNeuron, :mod:`.device`) the graph
runs on the ``neuron`` device: every tensor a kernel or a declared fallback sees is a device tensor,
and what the wrapper allocates itself (empty outputs, random keys, graph constants) is allocated
there. CPU tensors handed to such a graph follow TorchNeuron's documented convention for
``torch.compile`` inputs (the ``TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY`` setting of its
``torch.compile`` backend): copied to the device once, at the graph boundary (counted in
``stats.host_calls()["boundary_copies"]``), or refused when that variable is ``1``. A CPU tensor that
requires grad is always refused: its gradient would come back on the device, so the module belongs
on the device (``model.to("neuron")``).
"""
from __future__ import annotations

import contextlib
import contextvars
import os
from typing import Any, Iterator

import torch

from neuron_inductor import stats

DEVICE_TYPE = "neuron"
#: TorchNeuron's switch: ``1`` refuses CPU tensors as compiled-graph inputs instead of copying them
AUTOCOPY_OFF_ENV = "TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY"

_device: contextvars.ContextVar[torch.device | None] = contextvars.ContextVar(
    "neuron_inductor_graph_device", default=None)
#: graph constants already uploaded, by (id of the host constant, device)
_uploaded: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}
#: the host tensors that are graph constants of loaded wrapper modules (only these are uploaded)
_constants: dict[int, torch.Tensor] = {}


def mark_constants(module: Any) -> None:
    """Record the tensor constants a wrapper module builds at import (``C0 = torch.tensor(...)``)."""
    for v in vars(module).values():
        if isinstance(v, torch.Tensor):
            _constants[id(v)] = v


class CpuInputError(RuntimeError):
    """A CPU tensor given to a graph that runs on the ``neuron`` device, where it may not be copied."""


def graph_device() -> torch.device | None:
    """The device the running graph lives on (None: the host)."""
    return _device.get()


def _autocopy_off() -> bool:
    return os.environ.get(AUTOCOPY_OFF_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def to_graph_device(args: list, device: torch.device) -> None:
    """Replace CPU tensors in ``args`` (in place) by copies on ``device``, or refuse them."""
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor) or a.device.type == device.type:
            continue
        if a.device.type != "cpu":
            raise CpuInputError(f"graph input {i} is on {a.device}; this graph runs on {device}")
        if a.requires_grad:
            raise CpuInputError(f"graph input {i} is a CPU tensor that requires grad, given to a graph "
                                f"that runs on the {DEVICE_TYPE} device: its gradient would be on the "
                                f"device. Move the module to the device (model.to('{DEVICE_TYPE}')).")
        if _autocopy_off():
            raise CpuInputError(f"Input tensor at index {i} is on cpu device, and {AUTOCOPY_OFF_ENV}=1 "
                                f"refuses CPU inputs of a graph that runs on the {DEVICE_TYPE} device; "
                                f"move it with .to('{DEVICE_TYPE}')")
        stats.record_host_call("boundary_copies", "input")
        args[i] = a.to(device)


def check_outputs(out: Any, device: torch.device) -> None:
    """Every tensor a graph on the device returns is a device tensor: a host tensor here means some
    step (a declared fallback handed host tensors) computed on the host, which the device path
    never does (a compiler bug, reported as such)."""
    from .device import DeviceContractError

    for i, o in enumerate(out if isinstance(out, (tuple, list)) else (out,)):
        if isinstance(o, torch.Tensor) and o.device.type != device.type:
            raise DeviceContractError(f"graph output {i} is on {o.device}, not on {device}: a step of "
                                      "the graph ran on the host (a compiler bug; please report it)")


@contextlib.contextmanager
def running_on(device: torch.device | None) -> Iterator[None]:
    token = _device.set(device)
    try:
        yield
    finally:
        _device.reset(token)


def on_graph_device(t: Any) -> Any:
    """``t`` itself, or (a graph constant while the graph runs on the device) its device copy:
    constants are uploaded once per device and kept (one boundary copy each, ever). Any other host
    tensor is returned as it is, for the kernel call to refuse."""
    dev = _device.get()
    if dev is None or not isinstance(t, torch.Tensor) or t.device.type == dev.type or \
            _constants.get(id(t)) is not t:
        return t
    key = (id(t), str(dev))
    hit = _uploaded.get(key)
    if hit is not None and hit[0] is t:
        return hit[1]
    stats.record_host_call("boundary_copies", "constant")
    moved = t.to(dev)
    _uploaded[key] = (t, moved)
    return moved
