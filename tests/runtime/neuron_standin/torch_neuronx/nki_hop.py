"""Stand-in of TorchNeuron's ``wrap_nki``: ``wrap_nki(kernel)[grid](*args)`` calls the higher-order
op ``nki_kernel_wrapper``, which ``torch.compile`` records as one node of the captured graph.

The node's keyword arguments are the ones TorchNeuron's FX graphs show (``kernel_idx``, ``grid``,
``backend_config``, ``operand_output_aliases``, ``args``: the tensor arguments, ``arg_names``: their
parameter names, ``constant_args_key``: the non-tensor arguments, kept in ``kernel_registry``).
The kernel function itself is found through ``kernel_registry.get_func(kernel_idx)`` of the module
that defines the operator. Eagerly on ``neuron`` tensors the kernel runs through the stand-in
``nki.jit``; under fake tensors its outputs' shapes come from running it on zeros.
"""
from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch._C import DispatchKey
from torch._ops import HigherOrderOperator
from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
from torch.fx.experimental.proxy_tensor import (ProxyTorchDispatchMode, disable_proxy_modes_tracing,
                                                track_tensor_tree)


class KernelRegistry:
    def __init__(self) -> None:
        self.funcs: list = []
        self.names: list = []
        self.constants: dict[int, dict] = {}

    def add(self, func, names) -> int:
        for i, f in enumerate(self.funcs):
            if f is func:
                return i
        self.funcs.append(func)
        self.names.append(list(names))
        return len(self.funcs) - 1

    def get_func(self, idx: int):
        return self.funcs[idx]

    def get_arg_names(self, idx: int) -> list:
        return self.names[idx]

    def add_constant_args(self, args: dict) -> int:
        key = len(self.constants)
        self.constants[key] = dict(args)
        return key

    def get_constant_args(self, key: int) -> dict:
        return self.constants.get(key, {})


kernel_registry = KernelRegistry()


class NKIKernelWrapper(HigherOrderOperator):
    def __init__(self) -> None:
        super().__init__("nki_kernel_wrapper")

    def __call__(self, *, kernel_idx, grid, backend_config, operand_output_aliases, args, arg_names,
                 constant_args_key):
        return super().__call__(kernel_idx=kernel_idx, grid=grid, backend_config=backend_config,
                                operand_output_aliases=operand_output_aliases, args=args,
                                arg_names=arg_names, constant_args_key=constant_args_key)


nki_kernel_wrapper = NKIKernelWrapper()


def _all_args(kernel_idx, args, arg_names, constant_args_key) -> list:
    by_name = dict(zip(arg_names, args))
    by_name.update(kernel_registry.get_constant_args(constant_args_key))
    return [by_name[n] for n in kernel_registry.get_arg_names(kernel_idx)]


def _run(kernel_idx, grid, args, arg_names, constant_args_key):
    import nki

    kernel = nki.Kernel(kernel_registry.get_func(kernel_idx))
    lnc = grid[0] if grid else 1
    return kernel[lnc](*_all_args(kernel_idx, args, arg_names, constant_args_key))


@nki_kernel_wrapper.py_impl(DispatchKey.PrivateUse1)
def _device_impl(*, kernel_idx, grid, backend_config, operand_output_aliases, args, arg_names,
                 constant_args_key):
    return _run(kernel_idx, grid, args, arg_names, constant_args_key)


@nki_kernel_wrapper.py_impl(DispatchKey.CPU)
def _cpu_impl(**kwargs):
    raise NotImplementedError("could not find kernel for HigherOrderOperator nki_kernel_wrapper at "
                              "dispatch key DispatchKey.CPU: NKI kernels run on neuron tensors")


@nki_kernel_wrapper.py_impl(FakeTensorMode)
def _fake_impl(mode, *, kernel_idx, grid, backend_config, operand_output_aliases, args, arg_names,
               constant_args_key):
    device = next(a.device for a in args if isinstance(a, torch.Tensor))
    with unset_fake_temporarily():
        import nki

        zeros = [torch.zeros(a.shape, dtype=a.dtype) if isinstance(a, torch.Tensor) else a for a in args]
        sim_kernel = nki.Kernel(kernel_registry.get_func(kernel_idx))._sim
        out = sim_kernel(*_all_args(kernel_idx, zeros, arg_names, constant_args_key))
    with mode:
        return pytree.tree_map(lambda o: torch.empty(tuple(o.shape), dtype=o.dtype, device=device)
                               if isinstance(o, torch.Tensor) else o, out)


@nki_kernel_wrapper.py_impl(ProxyTorchDispatchMode)
def _proxy_impl(mode, **kwargs):
    with disable_proxy_modes_tracing():
        out = nki_kernel_wrapper(**kwargs)
    proxy_kwargs = pytree.tree_map(mode.tracer.unwrap_proxy, kwargs)
    proxy = mode.tracer.create_proxy("call_function", nki_kernel_wrapper, (), proxy_kwargs,
                                     name="nki_kernel_wrapper")
    return track_tensor_tree(out, proxy, constant=None, tracer=mode.tracer)


@nki_kernel_wrapper.py_functionalize_impl
def _functionalize_impl(ctx, *, kernel_idx, grid, backend_config, operand_output_aliases, args,
                        arg_names, constant_args_key):
    unwrapped = ctx.unwrap_tensors(list(args))
    with ctx.redispatch_to_next():
        out = nki_kernel_wrapper(kernel_idx=kernel_idx, grid=grid, backend_config=backend_config,
                                 operand_output_aliases=operand_output_aliases, args=tuple(unwrapped),
                                 arg_names=arg_names, constant_args_key=constant_args_key)
    return ctx.wrap_tensors(out)


for _key in (DispatchKey.PythonDispatcher, DispatchKey.PythonTLSSnapshot, DispatchKey.ADInplaceOrView,
             DispatchKey.BackendSelect, DispatchKey.AutocastCPU, DispatchKey.AutocastPrivateUse1,
             DispatchKey.AutogradCPU, DispatchKey.AutogradPrivateUse1):
    nki_kernel_wrapper.fallthrough(_key)


class NKIHOPCaller:
    """What ``wrap_nki`` returns: ``caller[grid](*args)`` launches the kernel through the operator."""

    def __init__(self, kernel_idx: int, grid: tuple, names: list) -> None:
        self.kernel_idx, self.grid, self.names = kernel_idx, grid, names

    def __getitem__(self, grid) -> "NKIHOPCaller":
        return NKIHOPCaller(self.kernel_idx, (grid,) if isinstance(grid, int) else tuple(grid), self.names)

    def __call__(self, *args):
        tensors = [(n, a) for n, a in zip(self.names, args) if isinstance(a, torch.Tensor)]
        constants = {n: a for n, a in zip(self.names, args) if not isinstance(a, torch.Tensor)}
        return nki_kernel_wrapper(kernel_idx=self.kernel_idx, grid=list(self.grid), backend_config="",
                                  operand_output_aliases={}, args=tuple(a for _, a in tensors),
                                  arg_names=[n for n, _ in tensors],
                                  constant_args_key=_constant_key(constants))


_KEYS: dict = {}


def _constant_key(constants: dict) -> int:
    k = tuple(sorted(constants.items()))
    if k not in _KEYS:
        _KEYS[k] = kernel_registry.add_constant_args(constants)
    return _KEYS[k]


def wrap_nki(kernel: Any) -> NKIHOPCaller:
    func = getattr(kernel, "func", kernel)
    names = list(inspect.signature(func).parameters)
    return NKIHOPCaller(kernel_registry.add(func, names), (1,), names)


torch._dynamo.allow_in_graph(nki_kernel_wrapper)
