"""``nki.jit`` on the simulator: argument conversion, the kernel call, output checks.

Arguments may be numpy arrays or torch CPU tensors (flat spans of device memory); both are wrapped
*without copying* as HBM tensors, so a kernel writing a parameter mutates the caller's data.  torch
is only touched through ``.numpy()``, ``.view(dtype)``, ``.detach()`` and ``torch.from_numpy`` —
never a compute op — because compiled graphs run under dispatch modes that must see no compute.
Returned ``shared_hbm`` arrays come back as torch tensors when any argument was torch, else numpy;
a returned parameter comes back as the caller's own object.  Every returned kernel-created HBM
tensor must have been written in full (rule ``output-not-written``).
"""
from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import numpy as np

from neuron_inductor.target import KERNEL_TARGET_NAME

from . import dtypes as dt
from .counters import finish_call
from .errors import refuse
from .state import kernel_context
from .tensor import Allocation, Tensor


def _is_torch(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


_NP_DTYPES: dict = {}


def _np_dtypes() -> None:
    import torch
    _NP_DTYPES.update({torch.float32: np.dtype(np.float32), torch.float16: np.dtype(np.float16),
                       torch.int32: np.dtype(np.int32), torch.int16: np.dtype(np.int16),
                       torch.int8: np.dtype(np.int8), torch.uint8: np.dtype(np.uint8),
                       torch.int64: np.dtype(np.int64), torch.float64: np.dtype(np.float64),
                       torch.uint16: np.dtype(np.uint16), torch.uint32: np.dtype(np.uint32)})


def _torch_to_numpy(t: Any, name: str) -> np.ndarray:
    """A numpy view of a (contiguous, CPU) tensor's memory, so kernel writes reach the caller.

    Not ``Tensor.numpy()``: exporting to numpy marks the tensor's storage as never resizable, and
    FSDP2 frees unsharded parameters (which it passes to kernels) with ``storage().resize_(0)``.
    The view is built from the data pointer instead; the caller keeps the tensor alive for the call."""
    import ctypes

    import torch

    if t.device.type != "cpu":
        raise refuse("argument", f"parameter {name}: tensor on device {t.device}; the simulator "
                     "runs on CPU tensors")
    if not t.is_contiguous():
        raise refuse("argument", f"parameter {name}: not contiguous; HBM parameters are flat "
                     "spans (pass a contiguous tensor)")
    if not _NP_DTYPES:
        _np_dtypes()
    if t.dtype == torch.bfloat16:
        np_dtype = np.dtype(dt.bfloat16)  # ml_dtypes is imported only when bf16 is used
    elif t.dtype == torch.bool:
        np_dtype = np.dtype(np.uint8)
    else:
        np_dtype = _NP_DTYPES[t.dtype]
    n = t.numel()
    if n == 0:
        return np.empty(t.shape, dtype=np_dtype)
    raw = (ctypes.c_char * (n * t.element_size())).from_address(t.data_ptr())
    return np.frombuffer(raw, dtype=np_dtype, count=n).reshape(t.shape)


def _numpy_to_torch(a: np.ndarray) -> Any:
    """A torch tensor with its own, ordinary storage holding ``a``'s bytes.

    Not ``torch.from_numpy``: storage shared with numpy can never be resized, and FSDP2 frees
    parameters with ``untyped_storage().resize_(0)``. The bytes move with a plain memcpy (no ATen
    op is dispatched, so the compiled program still only allocates and views on the host)."""
    import ctypes

    import torch

    a = np.ascontiguousarray(a)
    tdt = torch.bfloat16 if a.dtype.name == "bfloat16" else torch.from_numpy(a[:0]).dtype
    t = torch.empty(a.shape, dtype=tdt)
    if a.nbytes:
        ctypes.memmove(t.data_ptr(), a.ctypes.data, a.nbytes)
    return t


def _wrap_param(arg: Any, name: str, index: int) -> Any:
    if _is_torch(arg):
        arr = _torch_to_numpy(arg, name)
    elif isinstance(arg, np.ndarray):
        arr = arg
    else:
        return arg
    if dt.normalize(arr.dtype) is None:
        raise refuse("dtype", f"parameter {name}: dtype {arr.dtype} has no hardware type")
    if arr.dtype == np.bool_:
        arr = arr.view(np.uint8)
    if not arr.flags.c_contiguous:
        raise refuse("argument", f"parameter {name}: not contiguous; HBM parameters are flat "
                     "spans (pass a contiguous tensor)")
    return Allocation(name, "hbm", arr, written=False, param_index=index).whole()


class SimKernel:
    """A jitted kernel; calling it runs the body eagerly on the simulator."""

    def __init__(self, fn: Callable, **options: Any) -> None:
        self.fn = fn
        self.options = options
        functools.update_wrapper(self, fn)
        code = fn.__code__
        self._params = code.co_varnames[:code.co_argcount]

    def __getitem__(self, grid: Any) -> "SimKernel":
        if grid in (1, (1,)):
            return self
        raise refuse("unsupported", f"SPMD grid {grid!r}: the simulator runs a single instance")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        torch_mode = any(_is_torch(a) for a in (*args, *kwargs.values()))
        originals: dict[int, Any] = {}
        target = getattr(self.fn, "__globals__", {}).get(KERNEL_TARGET_NAME)
        with kernel_context(self.fn.__name__, self.fn.__code__, target) as ctx:
            wrapped = []
            for i, a in enumerate(args):
                name = self._params[i] if i < len(self._params) else f"arg{i}"
                w = _wrap_param(a, name, i)
                if w is not a:
                    originals[id(w.alloc)] = a
                wrapped.append(w)
            kw = {}
            for k, a in kwargs.items():
                w = _wrap_param(a, k, -1)
                if w is not a:
                    originals[id(w.alloc)] = a
                kw[k] = w
            result = self.fn(*wrapped, **kw)
            out = self._convert(result, originals, torch_mode)
        finish_call(ctx.counters)
        return out

    def _convert(self, result: Any, originals: dict[int, Any], torch_mode: bool) -> Any:
        if isinstance(result, tuple):
            return tuple(self._convert(r, originals, torch_mode) for r in result)
        if isinstance(result, list):
            return [self._convert(r, originals, torch_mode) for r in result]
        if not isinstance(result, Tensor):
            return result
        alloc = result.alloc
        if alloc.on_chip:
            raise refuse("return", f"kernel returns on-chip tile {alloc.name}; outputs must be "
                         "shared_hbm tensors", result)
        whole = result.dims == alloc.whole().dims
        if id(alloc) in originals and whole:
            return originals[id(alloc)]
        if alloc.written is not None and not alloc.written.all():
            missing = int((~alloc.written).sum())
            first = int(np.argmin(alloc.written))
            raise refuse("output-not-written", f"output {alloc.name} returned with {missing} of "
                         f"{alloc.written.size} elements never written (first: element {first})",
                         result)
        arr = result.array
        return _numpy_to_torch(arr) if torch_mode else arr


def jit(func: Callable | None = None, **options: Any) -> Any:
    """``@nki.jit`` or ``@nki.jit(**options)``; options (mode=, platform_target=) are ignored."""
    if func is None:
        return lambda f: SimKernel(f, **options)
    return SimKernel(func, **options)


simulate = jit
