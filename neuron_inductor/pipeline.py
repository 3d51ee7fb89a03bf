"""The compile pipeline for one ATen graph, as one list: :data:`STAGES`, read top to bottom.

    passes -> partition -> lower -> verify -> codegen -> conform -> cost

Each stage is a function from one artifact type to the next (small frozen dataclasses below), so a
test or a tool can run a prefix of the list (:func:`run` with ``until=``) and look at what it made.
The cache sits above this module: ``compile.py`` asks the cache, and on a miss runs :func:`run` and
stores the :class:`Built` result; a hit skips every stage.

Layering: this module orchestrates ``graph`` (passes, the partitioner), ``lowering``, ``ir`` (the
verifier), ``codegen`` and the cost model; none of them imports it. Counting (``stats``) and the
fallback warning belong to the caller, so running a prefix of the pipeline never moves a counter.
"""
from __future__ import annotations

import ast
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import torch.fx as fx

from . import lowering
from .config import Config
from .lowering.graph import LoweredGraph
from .lowering.groups import Group

log = logging.getLogger("neuron_inductor")


# ----------------------------------------------------------------------------- artifacts

@dataclass(frozen=True)
class GraphJob:
    """What the pipeline is asked to compile: one ATen graph, its AOT kind and the config."""

    gm: fx.GraphModule
    kind: str          # "forward", "backward" or "inference"
    cfg: Config
    name: str          # graph name: kernel module names and debug dumps use it
    started: float     # time.perf_counter() when the compile began (compile_seconds)


@dataclass(frozen=True)
class Prepared:
    """The graph after the FX passes (``graph/passes.py``)."""

    job: GraphJob
    gm: fx.GraphModule


@dataclass(frozen=True)
class Partitioned:
    """The graph cut into kernel groups by the partitioner (``graph/fusion.py``)."""

    job: GraphJob
    gm: fx.GraphModule
    groups: tuple[Group, ...]


@dataclass(frozen=True)
class Lowered:
    """The host program: kernel launches (tile IR), views, declared fallbacks and collectives."""

    job: GraphJob
    gm: fx.GraphModule
    lowered: LoweredGraph


@dataclass(frozen=True)
class Verified:
    """A lowered program the IR verifier accepted (every kernel, and the host program's naming)."""

    job: GraphJob
    gm: fx.GraphModule
    lowered: LoweredGraph


@dataclass(frozen=True)
class Generated:
    """The generated Python modules: ``kernels.py`` (NKI) and ``wrapper.py`` (the host program)."""

    job: GraphJob
    gm: fx.GraphModule
    lowered: LoweredGraph
    sources: Mapping[str, str]


@dataclass(frozen=True)
class Conforming:
    """Generated modules that passed the static checks (allowlist and NKI conformance)."""

    job: GraphJob
    gm: fx.GraphModule
    lowered: LoweredGraph
    sources: Mapping[str, str]


@dataclass(frozen=True)
class Built:
    """What the cache stores: the sources and their metadata (with the cost model's verdict)."""

    sources: Mapping[str, str]
    meta: dict[str, Any]
    lowered: LoweredGraph
    gm: fx.GraphModule


# ----------------------------------------------------------------------------- stages

def passes(job: GraphJob) -> Prepared:
    """FX cleanups and rewrites, in ``graph.passes.PASSES`` order (the cache key was taken before), on
    a copy: ``job.gm`` stays runnable eagerly, the declared fallback of a graph that fails later."""
    from .graph.passes import run_passes, working_copy

    return Prepared(job, run_passes(working_copy(job.gm), job.cfg))


def partition(p: Prepared) -> Partitioned:
    """Greedy fusion into kernel groups (``cfg.fusion=False``: one group per op)."""
    from .graph.fusion import partition as partition_graph
    from .lowering.transpose import tensor_transpose_exact
    from .target import get_target

    # a norm joins the GEMM after it where the GEMM's fp32 lhs transposes run on VectorE (trn1)
    prologues = not tensor_transpose_exact(get_target(p.job.cfg.target), "float32")
    return Partitioned(p.job, p.gm, tuple(partition_graph(p.gm, p.job.cfg.fusion, prologues)))


def lower(p: Partitioned) -> Lowered:
    """Each group to a kernel of tile IR; what cannot be lowered becomes a declared fallback."""
    return Lowered(p.job, p.gm, lowering.lower_graph(p.gm, list(p.groups), p.job.cfg, p.job.name))


def verify(lw: Lowered) -> Verified:
    """The IR verifier on every kernel and on the host program (``cfg.verify_ir``)."""
    if lw.job.cfg.verify_ir:
        from .ir.verify import verify_program
        from .target import get_target

        verify_program(lw.lowered.program, get_target(lw.job.cfg.target))
    return Verified(lw.job, lw.gm, lw.lowered)


def codegen(v: Verified) -> Generated:
    """The NKI kernels module and the host wrapper module; dumped to ``cfg.debug_dir`` if set
    (before the checks, so ``neuron-inductor lint DIR`` can show a module they refuse)."""
    from .codegen import generate_kernels_module, generate_wrapper_module

    program, cfg = v.lowered.program, v.job.cfg
    kernels_src = generate_kernels_module(program.kernels, graph_name=v.job.name, target=cfg.target,
                                          user_kernels=program.user_kernels)
    sources = {"kernels.py": kernels_src, "wrapper.py": generate_wrapper_module(program)}
    if cfg.debug_dir:
        _dump(Path(cfg.debug_dir) / v.job.name, v.gm, v.lowered, sources)
    return Generated(v.job, v.gm, v.lowered, sources)


def conform(g: Generated) -> Conforming:
    """Refuse kernels outside the allowlist or breaking a documented NKI rule (a refusal is never
    cached: the caller turns it into a declared graph fallback)."""
    from .codegen import check_kernel_source
    from .codegen.conform import check_conformance

    src = g.sources["kernels.py"]
    try:
        tree = ast.parse(src)
    except SyntaxError:
        tree = None   # check_kernel_source reports it
    check_kernel_source(src, user_kernels=g.lowered.program.user_kernels, tree=tree)
    check_conformance(src, tree=tree)
    return Conforming(g.job, g.gm, g.lowered, g.sources)


def cost(c: Conforming) -> Built:
    """The entry's metadata, with the cost model's per-kernel verdict (``cache show --cost``)."""
    program, job = c.lowered.program, c.job
    meta: dict[str, Any] = {
        "graph_name": job.name,
        "kind": job.kind,
        "n_kernels": len(program.kernels),
        "n_aten_ops": sum(1 for n in c.gm.graph.nodes if n.op == "call_function"),
        "fallbacks": [{"op": op, "shapes": s, "reason": r} for op, s, r in c.lowered.fallbacks],
        "collectives": [cc.target for cc in program.collectives],
        "compile_seconds": time.perf_counter() - job.started,
    }
    meta["cost"] = _model_cost(program.kernels, job.cfg)
    return Built(dict(c.sources), meta, c.lowered, c.gm)


#: the pipeline, in order; stage ``i`` returns what stage ``i + 1`` takes
STAGES: tuple[Callable[[Any], Any], ...] = (passes, partition, lower, verify, codegen, conform, cost)


def run(job: GraphJob, until: str | None = None) -> Any:
    """Run :data:`STAGES` on ``job``; with ``until`` (a stage's name) stop after that stage and return
    its artifact. The full run returns a :class:`Built`."""
    names = [s.__name__ for s in STAGES]
    if until is not None and until not in names:
        raise ValueError(f"unknown stage {until!r}; stages: {names}")
    x: Any = job
    for stage in STAGES:
        x = stage(x)
        if stage.__name__ == until:
            break
    return x


def job_for(gm: fx.GraphModule, cfg: Config, name: str = "graph", kind: str = "inference") -> GraphJob:
    return GraphJob(gm, kind, cfg, name, time.perf_counter())


def partition_and_lower(gm: fx.GraphModule, cfg: Config, name: str = "graph") -> LoweredGraph:
    """Partition, lower and verify ``gm`` as it is (no FX passes, no codegen): what tests and
    benchmarks that inspect the tile IR of a graph want."""
    x: Any = Prepared(job_for(gm, cfg, name), gm)
    for stage in (partition, lower, verify):
        x = stage(x)
    return x.lowered


# ----------------------------------------------------------------------------- helpers

def _model_cost(kernels: list, cfg: Config) -> dict | None:
    """Static and cheap (it summarises loop bodies, never unrolls them), but a pricing failure must
    never fail a compile: it is logged and recorded instead."""
    from .costmodel.model import estimate_program
    from .costmodel.summary import summarize_program
    from .target import get_target

    t0 = time.perf_counter()
    try:
        target = get_target(getattr(cfg, "target", None))
        out = summarize_program(estimate_program(kernels, target), target.name)
    except Exception as e:  # noqa: BLE001 - diagnostics only
        log.warning("neuron_inductor: cost model failed: %s: %s", type(e).__name__, e)
        return {"error": f"{type(e).__name__}: {e}"}
    out["model_seconds"] = time.perf_counter() - t0
    return out


def _dump(d: Path, gm: fx.GraphModule, lowered: LoweredGraph, sources: Mapping[str, str]) -> None:
    """Debug dump: the graph after passes, the grouping, the tile IR and the modules that run."""
    from .ir.printer import format_kernel, format_program
    try:
        d.mkdir(parents=True, exist_ok=True)
        (d / "graph.txt").write_text(gm.print_readable(print_output=False))
        groups = []
        for i, g in enumerate(lowered.groups):
            groups.append(f"group {i} [{g.kind}] domain={list(g.domain)} "
                          f"reduce={sorted(g.reduce_axes)}\n" +
                          "".join(f"    {n.format_node()}\n" for n in g.nodes))
        (d / "groups.txt").write_text("\n".join(groups))
        (d / "ir.txt").write_text("\n\n".join(format_kernel(k) for k in lowered.program.kernels) +
                                  "\n\n" + format_program(lowered.program))
        for fname, src in sources.items():
            (d / fname).write_text(src)
    except OSError as e:  # a debug aid must never break a compile
        log.warning("neuron_inductor: could not write debug dump to %s: %s", d, e)
