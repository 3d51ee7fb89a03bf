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

from . import dtypes as dt
from .counters import _finish_call
from .errors import refuse
from .state import kernel_context
from .tensor import Allocation, Tensor


def _is_torch(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _torch_to_numpy(t: Any, name: str) -> np.ndarray:
    import torch

    if t.device.type != "cpu":
        raise refuse("argument", f"parameter {name}: tensor on device {t.device}; the simulator "
                     "runs on CPU tensors")
    if t.requires_grad:
        t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(dt.bfloat16)
    if t.dtype == torch.float16:
        return t.view(torch.int16).numpy().view(np.float16)
    if t.dtype == torch.bool:
        return t.numpy().view(np.uint8)
    return t.numpy()


def _numpy_to_torch(a: np.ndarray) -> Any:
    import torch

    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


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
        with kernel_context(self.fn.__name__, self.fn.__code__) as ctx:
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
        _finish_call(ctx.counters)
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
