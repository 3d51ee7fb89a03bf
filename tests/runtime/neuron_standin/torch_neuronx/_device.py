"""The stand-in ``neuron`` device: a real PrivateUse1 registration whose memory is host memory.

What TorchNeuron does on import (Neuron docs, "torch.neuron and torch.accelerator reference"): it
registers Trainium as the PrivateUse1 backend named ``neuron`` with a ``torch.neuron`` device module.
This does the same with torch's Python-backend hooks (``torch.utils.backend_registration.
_setup_privateuseone_for_python_backend``, the mechanism of torch's own
``test/test_privateuseone_python_backend.py``). A ``neuron`` tensor is an ordinary ``torch.Tensor``
with ``device.type == "neuron"`` and its own sizes, strides and storage; the storage carries the
host tensor holding its bytes (``storage.raw``). Every ATen op on it goes through one PrivateUse1
fallback that runs the op on those bytes ("device execution") and returns ``neuron`` tensors; view
ops and ``set_`` are computed by the meta kernels on the device tensor itself, so views alias their
base exactly as on a real device.

It enforces the device rules a real backend has: an op mixing ``neuron`` tensors with CPU tensors
that are not 0-dim scalars fails (as PyTorch's device checks do), and every host<->device transfer
is counted in :data:`COPIES`.
"""
from __future__ import annotations

import torch
import torch.utils._pytree as pytree

NAME = "neuron"
COPIES = {"host_to_device": 0, "device_to_host": 0}
_DK = torch._C.DispatchKey
_state = {"installed": False, "available": True, "lib": None}


class DeviceRuleViolation(RuntimeError):
    """What a real device backend refuses (tensors on two devices in one op)."""


class DeviceModule:
    """``torch.neuron``: the device module TorchNeuron registers (the functions tests need)."""

    @staticmethod
    def is_available() -> bool:
        return _state["available"]

    @staticmethod
    def device_count() -> int:
        return 1 if _state["available"] else 0

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def set_device(i: int) -> None:
        return None

    @staticmethod
    def synchronize(device=None) -> None:
        return None

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        return None

    @staticmethod
    def manual_seed(seed: int) -> None:
        return None

    @staticmethod
    def get_amp_supported_dtype():
        return [torch.bfloat16, torch.float16]


def is_device(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == NAME


def raw(t: torch.Tensor) -> torch.Tensor:
    """The host view of a device tensor's bytes (same sizes, strides, offset)."""
    flat = t.untyped_storage().raw  # the bytes, viewed in this tensor's dtype (views may reinterpret)
    if t.dtype != flat.dtype:
        flat = flat.view(t.dtype) if t.dtype != torch.bool else flat.view(torch.uint8).view(torch.bool)
    return torch.as_strided(flat, t.shape, t.stride(), t.storage_offset())


def wrap(o: torch.Tensor) -> torch.Tensor:
    """A device tensor whose bytes are ``o``'s storage (no copy: device memory the op allocated)."""
    st = o.untyped_storage()
    n = st.nbytes() // o.element_size() if o.element_size() else 0
    flat = torch.empty(0, dtype=torch.uint8).set_(st, 0, (st.nbytes(),), (1,))
    base = torch._C._acc.create_empty_tensor([n], o.dtype)
    base.untyped_storage().raw = flat
    return torch.ops.aten.as_strided.default._op_dk(_DK.Meta, base, list(o.shape), list(o.stride()),
                                                    o.storage_offset())


def _unwrap(x):
    return raw(x) if is_device(x) else x


def _check_devices(op, leaves) -> None:
    devs = [x for x in leaves if isinstance(x, torch.Tensor)]
    if any(is_device(x) for x in devs):
        for x in devs:
            if not is_device(x) and x.dim() > 0:
                raise DeviceRuleViolation(f"{op}: expected all tensors to be on the same device, but "
                                          f"found neuron:0 and {x.device} (a host tensor of shape "
                                          f"{tuple(x.shape)} on the device path)")


_COPY_OPS = ("aten::_copy_from", "aten::_copy_from_and_resize")
_META_OPS = ("aten::set_",)


def _is_view(op) -> bool:
    rets = op._schema.returns
    return bool(rets) and all(r.alias_info is not None and not r.alias_info.is_write for r in rets)


def _fallback(op, *args, **kwargs):
    name = op._schema.name
    if name in _COPY_OPS:
        src, dst = args[0], args[1]
        if is_device(dst) and not is_device(src):
            COPIES["host_to_device"] += 1
        elif is_device(src) and not is_device(dst):
            COPIES["device_to_host"] += 1
        _unwrap(dst).copy_(_unwrap(src))
        return dst
    if name == "aten::_local_scalar_dense":
        COPIES["device_to_host"] += 1
        return op(raw(args[0]))
    if name in _META_OPS or _is_view(op):
        try:
            return op._op_dk(_DK.Meta, *args, **kwargs)
        except Exception:
            if name in _META_OPS:
                raise
    leaves = pytree.tree_leaves((args, kwargs))
    _check_devices(name, leaves)
    to_dev = False
    dev = kwargs.get("device")
    if dev is not None and torch.device(dev).type == NAME:
        kwargs = dict(kwargs, device=torch.device("cpu"))
        to_dev = True
    to_dev = to_dev or any(is_device(x) for x in leaves)
    rargs, rkw = pytree.tree_map(_unwrap, (args, kwargs))
    out = op(*rargs, **rkw)
    schema = op._schema
    rets = schema.returns
    if rets and all(r.alias_info is not None and r.alias_info.is_write for r in rets):
        outs = []
        for r in rets:  # in-place / out=: the written arguments themselves
            for a in schema.arguments:
                if a.alias_info is not None and a.alias_info.before_set == r.alias_info.before_set:
                    pos = [x.name for x in schema.arguments].index(a.name)
                    outs.append(kwargs[a.name] if a.name in kwargs else args[pos])
                    break
        return outs[0] if len(outs) == 1 else tuple(outs)
    if not to_dev:
        return out
    return pytree.tree_map(lambda o: wrap(o) if isinstance(o, torch.Tensor) else o, out)


def install() -> None:
    """Register the ``neuron`` device once per process (PrivateUse1 can be named only once)."""
    if _state["installed"]:
        return
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend(NAME, backend_module=DeviceModule())
    lib = torch.library.Library("_", "IMPL")
    lib.fallback(_fallback, "PrivateUse1")
    _state["lib"] = lib
    _state["installed"] = True


def set_available(available: bool) -> None:
    _state["available"] = available


def reset_copies() -> dict:
    snap = dict(COPIES)
    for k in COPIES:
        COPIES[k] = 0
    return snap
