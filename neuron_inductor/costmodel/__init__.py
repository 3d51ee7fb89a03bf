"""Static Trainium cost model: walks tile-IR kernels, validated against the NKI matmul tutorial."""
from .model import KernelCost, ProgramCost, estimate_kernel, estimate_program
from .report import format_cost_table

__all__ = ["KernelCost", "ProgramCost", "estimate_kernel", "estimate_program", "format_cost_table"]
