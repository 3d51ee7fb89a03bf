"""compile_graph: one ATen graph in, one callable out — through the cache, else the pipeline.

The stages themselves are ``pipeline.STAGES`` (passes -> partition -> lower -> verify -> codegen ->
conform -> cost); ``build_artifact`` runs them and is what the cache calls on a miss; a hit skips all
of it. What a compile counts goes to :mod:`neuron_inductor.stats`.
"""
from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections import Counter
from typing import Any, Callable, Iterator, Sequence

import torch.fx as fx

from . import pipeline, stats
from .cache import Artifact, compile_cached
from .config import Config

log = logging.getLogger("neuron_inductor")

_graph_ids: Counter = Counter()


def build_artifact(gm: fx.GraphModule, kind: str, cfg: Config, name: str) -> Artifact:
    """Run the whole pipeline on ``gm``, count what it made and return the generated sources with
    their metadata."""
    built = pipeline.run(pipeline.GraphJob(gm, kind, cfg, name, time.perf_counter()))
    program, fallbacks = built.lowered.program, built.lowered.fallbacks
    stats.record_compile(graphs_compiled=1, kernels_generated=len(program.kernels),
                         user_kernel_calls=len(program.user_kernel_calls),  # hand-written kernels called
                         collectives=len(program.collectives),  # declared host calls, not fallbacks
                         aten_ops=built.meta["n_aten_ops"])
    stats.report_fallbacks(name, list(fallbacks), cfg.fallback == "warn")
    return Artifact(dict(built.sources), built.meta, data=program_data(program))


def program_data(program: Any) -> dict[str, str]:
    """``{"program.json": ...}``: the program as data, from which ``cache import`` regenerates the
    sources on another machine; empty when it cannot be carried (hand-written kernels, whose
    sources are not IR), so that entry stays local."""
    import json

    from .ir.serial import SerialError, encode

    if program.user_kernels:
        return {}
    try:
        return {"program.json": json.dumps(encode(program), separators=(",", ":"))}
    except (SerialError, Exception) as e:  # noqa: BLE001 - an export aid must never fail a compile
        log.debug("program of %s not serialisable (%s): its entry cannot be exported", program.name, e)
        return {}


def graph_name(gm: fx.GraphModule, kind: str) -> str:
    base = getattr(gm, "_neuron_name", None) or "graph"
    _graph_ids[(base, kind)] += 1
    return f"{base}_{kind}_{_graph_ids[(base, kind)] - 1}"


def compile_graph(gm: fx.GraphModule, example_inputs: Sequence[Any], kind: str, cfg: Config,
                  record_into: Any = None) -> Callable:
    """The compiled callable for one ATen graph (boxed: takes a list of inputs). ``record_into``: the
    Dynamo-level cache recording this graph feeds (``cache.dynamo.Recording``), if any."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from .cache import CacheSecurityError
    from .lowering import FallbackError

    from .runtime.nki import RuntimeUnavailable, backend

    name = graph_name(gm, kind)
    backend()  # runtime='device' without a usable device runtime: a clear configuration error first
    # AOTAutograd calls us inside its fake mode; our pipeline works on real constants and metadata
    with unset_fake_temporarily(), gc_paused():
        try:
            return compile_cached(gm, list(example_inputs), kind, cfg,
                                  lambda: build_artifact(gm, kind, cfg, name), record_into=record_into)
        except (FallbackError, CacheSecurityError, RuntimeUnavailable):
            raise
        except Exception as e:  # a compiler bug must not kill the user's training run
            if cfg.fallback == "error":
                raise
            log.warning("neuron_inductor: internal error compiling graph %s (%s: %s); this graph runs "
                        "eagerly instead (declared graph fallback). Please report it with "
                        "NEURON_INDUCTOR_DEBUG_DIR set.", name, type(e).__name__, e)
            log.debug("neuron_inductor: traceback of the internal error in graph %s", name, exc_info=True)
            stats.record_compile(graph_fallbacks=1)
            stats.record_fallback_op(f"<whole {kind} graph>")
            return _eager_graph(gm)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a graph compiles. AOTAutograd and the pipeline allocate
    millions of short-lived objects (fake tensors, tile IR, sympy, the AST of the generated module
    that is checked and compiled), which trigger full collections of the whole process heap (torch,
    Dynamo's graphs): measured at a third of the pipeline's time on the tiny Llama. Those objects
    are freed by reference counting; whatever cycles a compile leaves are collected as usual
    afterwards. Nests (the backend pauses around AOTAutograd, compile_graph around each graph)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _eager_graph(gm: fx.GraphModule) -> Callable:
    """The graph itself, run op by op in eager ATen, in our boxed calling convention."""
    def run(args: list):
        try:
            return gm(*args)
        finally:
            args.clear()
    return run
