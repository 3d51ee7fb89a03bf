"""compile_graph: one ATen graph in, one callable out — through the cache, else the full pipeline.

Stages (each a seam for tests and the cache): passes -> fusion + lowering -> codegen -> static check
-> load. ``build_artifact`` is what the cache calls on a miss; a hit skips all of it.
"""
from __future__ import annotations

import logging
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx

from .cache import Artifact, compile_cached
from .config import Config

log = logging.getLogger("neuron_inductor")

#: process-wide counters: graphs compiled, kernels generated, fallback ops by name
counters: Counter = Counter()
fallback_ops: Counter = Counter()
_graph_ids: Counter = Counter()


def reset_counters() -> None:
    counters.clear()
    fallback_ops.clear()


def build_artifact(gm: fx.GraphModule, kind: str, cfg: Config, name: str) -> Artifact:
    """Run the whole pipeline on ``gm`` and return the generated sources with their metadata."""
    from .codegen import check_kernel_source, generate_kernels_module, generate_wrapper_module
    from .codegen.conform import check_conformance
    from .graph.passes import run_passes
    from .lowering import lower_graph

    t0 = time.perf_counter()
    gm.meta["fusion"] = cfg.fusion  # passes that only enable fusion skip unfused builds
    gm = run_passes(gm)  # the cache key was taken before; AOT does not reuse gm
    lowered = lower_graph(gm, cfg, name)
    program = lowered.program
    if cfg.verify_ir:
        from .ir.verify import verify_host_program
        verify_host_program(program)
    kernels_src = generate_kernels_module(program.kernels, graph_name=name, target=cfg.target,
                                          user_kernels=program.user_kernels)
    check_kernel_source(kernels_src, user_kernels=program.user_kernels)
    wrapper_src = generate_wrapper_module(program)
    counters["graphs_compiled"] += 1
    counters["kernels_generated"] += len(program.kernels)
    counters["user_kernel_calls"] += len(program.user_kernel_calls)  # hand-written kernels called
    counters["collectives"] += len(program.collectives)  # declared host calls, not fallbacks
    counters["aten_ops"] += sum(1 for n in gm.graph.nodes if n.op == "call_function")
    for op, shapes, reason in lowered.fallbacks:
        fallback_ops[op] += 1
    if lowered.fallbacks and cfg.fallback == "warn":
        lines = "\n".join(f"  {op}({shapes}): {reason}" for op, shapes, reason in lowered.fallbacks)
        log.warning("neuron_inductor: graph %s runs %d op(s) eagerly on the host (declared "
                    "fallbacks):\n%s", name, len(lowered.fallbacks), lines)
    meta = {
        "graph_name": name,
        "kind": kind,
        "n_kernels": len(program.kernels),
        "n_aten_ops": sum(1 for n in gm.graph.nodes if n.op == "call_function"),
        "fallbacks": [{"op": op, "shapes": s, "reason": r} for op, s, r in lowered.fallbacks],
        "collectives": [c.target for c in program.collectives],
        "compile_seconds": time.perf_counter() - t0,
    }
    meta["cost"] = _model_cost(program.kernels, cfg)
    sources = {"kernels.py": kernels_src, "wrapper.py": wrapper_src}
    if cfg.debug_dir:
        _dump(Path(cfg.debug_dir) / name, gm, lowered, sources)
    # after the dump, so `neuron-inductor lint DIR` can show a refused module; a refusal is never cached
    check_conformance(kernels_src)
    return Artifact(sources, meta)


def _model_cost(kernels, cfg: Config) -> dict | None:
    """The cost model's per-kernel verdict, stored with the entry so ``cache show --cost`` can print
    it without recompiling. Static and cheap (it summarises loop bodies, never unrolls them), but a
    pricing failure must never fail a compile: it is logged and recorded instead."""
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


def _dump(d: Path, gm: fx.GraphModule, lowered, sources: dict[str, str]) -> None:
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


def graph_name(gm: fx.GraphModule, kind: str) -> str:
    base = getattr(gm, "_neuron_name", None) or "graph"
    _graph_ids[(base, kind)] += 1
    return f"{base}_{kind}_{_graph_ids[(base, kind)] - 1}"


def compile_graph(gm: fx.GraphModule, example_inputs: Sequence[Any], kind: str, cfg: Config) -> Callable:
    """The compiled callable for one ATen graph (boxed: takes a list of inputs)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from .cache import CacheSecurityError
    from .lowering import FallbackError

    name = graph_name(gm, kind)
    # AOTAutograd calls us inside its fake mode; our pipeline works on real constants and metadata
    with unset_fake_temporarily():
        try:
            return compile_cached(gm, list(example_inputs), kind, cfg,
                                  lambda: build_artifact(gm, kind, cfg, name))
        except (FallbackError, CacheSecurityError):
            raise
        except Exception as e:  # a compiler bug must not kill the user's training run
            if cfg.fallback == "error":
                raise
            log.warning("neuron_inductor: internal error compiling graph %s (%s: %s); this graph runs "
                        "eagerly instead (declared graph fallback). Please report it with "
                        "NEURON_INDUCTOR_DEBUG_DIR set.", name, type(e).__name__, e)
            counters["graph_fallbacks"] += 1
            fallback_ops[f"<whole {kind} graph>"] += 1
            return _eager_graph(gm)


def _eager_graph(gm: fx.GraphModule) -> Callable:
    """The graph itself, run op by op in eager ATen, in our boxed calling convention."""
    def run(args: list):
        try:
            return gm(*args)
        finally:
            args.clear()
    return run
