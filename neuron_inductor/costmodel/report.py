"""Human-readable cost tables (for ``cache show --cost``, benchmarks and the README)."""
from __future__ import annotations

from typing import Sequence

from .model import ENGINES, KernelCost, ProgramCost


def _fmt_time(s: float) -> str:
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} us"


def _fmt_bytes(b: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if b >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{b:.0f} B"


def format_cost_table(costs: ProgramCost | Sequence[KernelCost]) -> str:
    """One row per kernel: time, bound, per-engine utilization, FLOPs, HBM bytes; then the total
    and, for a program, its critical kernels."""
    kernels = costs.kernels if isinstance(costs, ProgramCost) else list(costs)
    util_hdr = " ".join(f"{e[:6]:>6}" for e in ENGINES)
    name_w = max([len("kernel")] + [len(k.name) for k in kernels])
    lines = [f"{'kernel':<{name_w}}  {'time':>11}  {'bound':<8}  {util_hdr}  {'MFU':>6}  "
             f"{'GFLOP':>9}  {'HBM':>10}"]
    for k in kernels:
        util = " ".join(f"{100 * k.utilization[e]:5.1f}%" for e in ENGINES)
        lines.append(f"{k.name:<{name_w}}  {_fmt_time(k.seconds):>11}  {k.bound:<8}  {util}  "
                     f"{100 * k.mfu:5.1f}%  {k.flops / 1e9:9.2f}  {_fmt_bytes(k.hbm_bytes):>10}")
    total = sum(k.seconds for k in kernels)
    lines.append(f"{'total':<{name_w}}  {_fmt_time(total):>11}  {len(kernels)} kernel(s), "
                 f"{sum(k.flops for k in kernels) / 1e9:.2f} GFLOP, "
                 f"{_fmt_bytes(sum(k.hbm_bytes for k in kernels))} HBM")
    if isinstance(costs, ProgramCost) and costs.critical and total > 0:
        crit = ", ".join(f"{k.name} ({100 * k.seconds / total:.0f}%)" for k in costs.critical)
        lines.append(f"critical: {crit}")
    return "\n".join(lines)
