"""The cost model's verdict as plain JSON, and the table printed from it.

Why a separate module: compile metadata lives in the cache as JSON and is read back by
``neuron-inductor cache show --cost``, a command that must start without importing torch or sympy.
So this module imports nothing heavy; the model objects are converted where they are made.
"""
from __future__ import annotations

from typing import Any

#: engines in the order the table prints them (same as costmodel.model.ENGINES)
ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")
#: bump when the meaning of the numbers changes (a new model version re-prices old entries only on
#: recompile, so readers can tell which model priced an entry)
MODEL_VERSION = 1


def summarize_program(pc: Any, target: str) -> dict[str, Any]:
    """JSON-able summary of a ``ProgramCost``: one record per kernel and the totals."""
    kernels = [{
        "name": k.name,
        "seconds": k.seconds,
        "bound": k.bound,
        "utilization": {e: round(k.utilization.get(e, 0.0), 4) for e in ENGINES},
        "flops": k.flops,
        "matmul_flops": k.matmul_flops,
        "hbm_bytes": k.hbm_bytes,
        "dma_bytes": getattr(k, "dma_bytes", 0.0),
        "dma_small_bytes": getattr(k, "dma_small_bytes", 0.0),
        "mfu": round(k.mfu, 4),
    } for k in pc.kernels]
    return {
        "model_version": MODEL_VERSION,
        "target": target,
        "kernels": kernels,
        "total": {"seconds": pc.seconds, "flops": pc.flops, "matmul_flops": pc.matmul_flops,
                  "hbm_bytes": pc.hbm_bytes, "n_kernels": len(kernels)},
        "critical": [k.name for k in pc.critical],
    }


def is_cost_summary(cost: Any) -> bool:
    return isinstance(cost, dict) and isinstance(cost.get("kernels"), list) and "total" in cost


def _fmt_time(s: float) -> str:
    return f"{s * 1e3:.3f} ms" if s >= 1e-3 else f"{s * 1e6:.1f} us"


def _fmt_bytes(b: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if b >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{b:.0f} B"


def format_cost_summary(cost: dict[str, Any]) -> str:
    """The per-kernel table (same columns as ``format_cost_table``) from a stored summary."""
    kernels = cost["kernels"]
    util_hdr = " ".join(f"{e[:6]:>6}" for e in ENGINES)
    name_w = max([len("kernel")] + [len(k["name"]) for k in kernels])
    lines = [f"modelled on {cost.get('target', '?')} (cost model v{cost.get('model_version', '?')})",
             f"{'kernel':<{name_w}}  {'time':>11}  {'bound':<8}  {util_hdr}  {'MFU':>6}  "
             f"{'GFLOP':>9}  {'HBM':>10}"]
    for k in kernels:
        u = k.get("utilization", {})
        util = " ".join(f"{100 * u.get(e, 0.0):5.1f}%" for e in ENGINES)
        lines.append(f"{k['name']:<{name_w}}  {_fmt_time(k['seconds']):>11}  {k['bound']:<8}  {util}  "
                     f"{100 * k.get('mfu', 0.0):5.1f}%  {k['flops'] / 1e9:9.2f}  "
                     f"{_fmt_bytes(k['hbm_bytes']):>10}")
    t = cost["total"]
    lines.append(f"{'total':<{name_w}}  {_fmt_time(t['seconds']):>11}  {t['n_kernels']} kernel(s), "
                 f"{t['flops'] / 1e9:.2f} GFLOP, {_fmt_bytes(t['hbm_bytes'])} HBM")
    dma = sum(k.get("dma_bytes", 0.0) for k in kernels)
    if dma > 0:
        small = sum(k.get("dma_small_bytes", 0.0) for k in kernels)
        lines.append(f"DMA bytes in descriptors < 2 KiB/partition: {100 * small / dma:.0f}%")
    if cost.get("critical") and t["seconds"] > 0:
        by_name = {k["name"]: k["seconds"] for k in kernels}
        crit = ", ".join(f"{n} ({100 * by_name.get(n, 0.0) / t['seconds']:.0f}%)" for n in cost["critical"])
        lines.append(f"critical: {crit}")
    if cost.get("skipped"):
        lines.append(f"note: {cost['skipped']}")
    return "\n".join(lines)
