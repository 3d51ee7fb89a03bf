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


def source_ops(provenance: Sequence[str], limit: int = 6) -> str:
    """The distinct aten ops a kernel computes, in order (``mm, mul, _to_copy``), from the
    ``name = target(args) -> type`` lines of ``Kernel.provenance``."""
    ops: list[str] = []
    for line in provenance:
        target = line.split(" = ", 1)[-1].split("(", 1)[0]
        if target.startswith("<built-in function "):
            target = target[len("<built-in function "):].rstrip(">")
        op = target.split(".")[1] if target.startswith("aten.") and "." in target else target
        if op not in ops:
            ops.append(op)
    more = f" +{len(ops) - limit}" if len(ops) > limit else ""
    return ", ".join(ops[:limit]) + more


def bound_by(k: KernelCost) -> str:
    """The model's bound, naming the engine when it is compute (``vector``), ``dma`` for memory."""
    if k.bound == "compute":
        return max(ENGINES[:-1], key=lambda e: k.busy_s.get(e, 0.0))
    return {"memory": "dma"}.get(k.bound, k.bound)


def format_kernel_report(costs: ProgramCost, findings: dict[str, int] | None = None) -> str:
    """The table a performance engineer acts on, slowest kernel first: time and share of the step,
    what bounds it (the busiest engine, ``dma`` or ``overhead``), each engine's busy share, HBM bytes
    against the kernel's minimum (every parameter read once, every output written once), the share
    of DMA bytes moved in descriptors under 2 KiB per partition, NKI conformance findings
    (``findings``: kernel -> count, when given) and the source ops."""
    total = costs.seconds or 1.0
    kernels = sorted(costs.kernels, key=lambda k: -k.seconds)
    name_w = min(40, max([len("kernel")] + [len(k.name) for k in kernels]))
    eng = " ".join(f"{e[:3]:>4}" for e in ENGINES)
    conf = "  nki" if findings is not None else ""
    lines = [f"{'kernel':<{name_w}}  {'time':>10}  {'step':>5}  {'bound':<8}  {eng}  {'HBM':>9}  "
             f"{'xmin':>5}  {'<2K':>4}{conf}  source ops",
             f"{'':<{name_w}}  {'':>10}  {'':>5}  {'':<8}  {'(engine busy % of kernel time)':<24}  "
             f"{'':>9}  {'':>5}  {'DMA':>4}"]
    for k in kernels:
        util = " ".join(f"{100 * k.utilization[e]:4.0f}" for e in ENGINES)
        xmin = f"{k.hbm_bytes / k.min_hbm_bytes:5.1f}" if k.min_hbm_bytes else "    -"
        nki = f"  {findings.get(k.name, 0):>3}" if findings is not None else ""
        name = k.name if len(k.name) <= name_w else k.name[:name_w - 1] + "~"
        lines.append(f"{name:<{name_w}}  {_fmt_time(k.seconds):>10}  {100 * k.seconds / total:4.1f}%  "
                     f"{bound_by(k):<8}  {util}  {_fmt_bytes(k.hbm_bytes):>9}  {xmin}  "
                     f"{100 * k.small_dma_share:3.0f}%{nki}  {source_ops(k.provenance)}")
    minimum = sum(k.min_hbm_bytes for k in kernels)
    lines.append(f"{'total':<{name_w}}  {_fmt_time(costs.seconds):>10}  {len(kernels)} kernel(s), "
                 f"{_fmt_bytes(costs.hbm_bytes)} HBM = {costs.hbm_bytes / max(minimum, 1):.1f}x the "
                 f"kernels' own minimum, {100 * costs.small_dma_share:.0f}% of DMA bytes in descriptors "
                 f"< 2 KiB/partition")
    return "\n".join(lines)


def engine_shares(costs: ProgramCost) -> dict[str, float]:
    """Each engine's busy seconds over the step's modelled time (which engine the step leans on)."""
    total = costs.seconds or 1.0
    return {e: sum(k.busy_s.get(e, 0.0) for k in costs.kernels) / total for e in ENGINES}


def step_figures(costs: ProgramCost, useful_flops: float, minimum_hbm: float, peak_flops: float,
                 findings: dict[str, int] | None = None) -> dict[str, float]:
    """The headline numbers of one modelled step: time, MFU (useful FLOPs, not TensorE's), HBM
    traffic against the step's minimum, kernel count, small-descriptor DMA share, engine shares."""
    secs = costs.seconds
    figs = {
        "ms": secs * 1e3,
        "mfu": 100 * useful_flops / (secs * peak_flops) if secs > 0 else 0.0,
        "hfu": 100 * costs.matmul_flops / (secs * peak_flops) if secs > 0 else 0.0,
        "traffic": costs.hbm_bytes / minimum_hbm if minimum_hbm else 0.0,
        "kernels": float(len(costs.kernels)),
        "small_dma": 100 * costs.small_dma_share,
    }
    figs.update({f"busy_{e}": 100 * s for e, s in engine_shares(costs).items()})
    if findings is not None:
        figs["nonconforming"] = float(sum(1 for n in findings.values() if n))
    return figs


#: how each headline figure prints: label, format, unit
_FIGURES = (("ms", "step time", "{:.1f}", " ms"), ("mfu", "MFU", "{:.1f}", "%"),
            ("traffic", "HBM traffic", "{:.2f}", "x min"), ("kernels", "kernels", "{:.0f}", ""),
            ("small_dma", "DMA bytes <2KiB/part", "{:.0f}", "%"))


def format_step_summary(figs: dict[str, float], previous: dict[str, float] | None = None) -> str:
    """Headline figures, with a ``before -> after`` column for those ``previous`` has."""
    lines = []
    for key, label, fmt, unit in _FIGURES:
        now = fmt.format(figs[key]) + unit
        before = f"   (was {fmt.format(previous[key])}{unit})" if previous and key in previous else ""
        lines.append(f"  {label:<22} {now:>10}{before}")
    busy = ", ".join(f"{e} {figs[f'busy_{e}']:.0f}%" for e in ENGINES)
    lines.append(f"  {'engine busy / step':<22} {busy}")
    if "nonconforming" in figs:
        lines.append(f"  {'non-conforming kernels':<22} {figs['nonconforming']:>10.0f}   (IR verifier findings; "
                     f"priced anyway)")
    return "\n".join(lines)
