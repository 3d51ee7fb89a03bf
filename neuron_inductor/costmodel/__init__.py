"""Static Trainium cost model: walks tile-IR kernels, validated against the NKI matmul tutorial.

Exports are lazy so that ``costmodel.summary`` (used by the torch-free cache CLI) does not pull in
sympy and the IR.
"""
from typing import Any

__all__ = ["KernelCost", "ProgramCost", "estimate_kernel", "estimate_program", "format_cost_table"]


def __getattr__(name: str) -> Any:
    if name in ("KernelCost", "ProgramCost", "estimate_kernel", "estimate_program"):
        from . import model
        return getattr(model, name)
    if name == "format_cost_table":
        from .report import format_cost_table
        return format_cost_table
    raise AttributeError(name)
