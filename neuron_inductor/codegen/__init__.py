"""Tile IR -> NKI source: the kernels module, the host wrapper module, and the static allowlist check."""
from .check import KernelCheckError, check_kernel_source
from .kernel import generate_kernels_module
from .wrapper import generate_wrapper_module

__all__ = ["KernelCheckError", "check_kernel_source", "generate_kernels_module",
           "generate_wrapper_module"]
