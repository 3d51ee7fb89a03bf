"""The cache's two seams and the tiers behind them, both served by ``orchestrate.serve``.

:func:`compile_cached` (ATen graphs, called by ``compile.py``): a hit (memory, then disk) returns the
loaded module without calling ``compile_fn``, so nothing of decomposition, fusion, lowering or codegen
runs; a miss compiles under a per-key file lock and publishes the entry atomically.
:func:`compile_dynamo_cached` (Dynamo graphs, called by ``backend.py``): a hit skips AOTAutograd.
How faults degrade (to an uncached compile with a warning; an unsafe cache dir is a hard error) is
the orchestrator's, in one place.
"""
from __future__ import annotations

import collections
import json
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch.fx

from .. import stats as _stats
from . import dynamo as _dynamo
from . import orchestrate, validate
from .key import key_of, make_record
from .orchestrate import NeuronCacheWarning, clear_memory
from .store import META, PLAN, Store, default_root

log = logging.getLogger("neuron_inductor.cache")

@dataclass
class Artifact:
    """What a compile produces: generated sources by file name, JSON-able metadata, and ``data``:
    JSON files the entry keeps beside them (``program.json``: the program the sources were
    generated from, what ``cache import`` regenerates them from on another machine)."""

    sources: dict[str, str]
    meta: dict = field(default_factory=dict)
    data: dict[str, str] = field(default_factory=dict)


# -- loading ----------------------------------------------------------------------------------------
def _runtime_loader() -> Any:
    """Imported lazily: the runtime pulls in the simulator, which a cache-only tool never needs."""
    from neuron_inductor.runtime import loader

    return loader


def _load_uncached(artifact: Artifact) -> Callable:
    return _runtime_loader().load_sources(dict(artifact.sources))


def _report_cached_fallbacks(meta: Any, warn: bool) -> None:
    """The declared fallbacks the entry's compile reported, reported again in this process (a
    graph loaded from disk runs the same host ops). Malformed metadata reports nothing."""
    if not isinstance(meta, dict) or not isinstance(meta.get("fallbacks"), list):
        return
    found = [(str(f.get("op"))[:200], str(f.get("shapes"))[:400], str(f.get("reason"))[:400])
             for f in meta["fallbacks"] if isinstance(f, dict)]
    _stats.report_fallbacks(str(meta.get("graph_name", "?"))[:200], found, warn, cached=True)


# -- the ATen-graph tier ----------------------------------------------------------------------------
class AtenTier:
    """Entries of generated sources (plus their bytecode and ``program.json``), one per ATen graph."""

    memo, locked, fetches = True, True, None

    def __init__(self, root: Path, warn: bool, job: "AtenJob | None" = None) -> None:
        self.root, self.warn, self.job = root, warn, job

    def load(self, entry: Path, fetch: orchestrate.Fetch) -> Callable:
        fn = _runtime_loader().load_dir(entry)
        try:  # verify() checked the shape: a number or absent
            meta = validate.read_json(entry / META)
            saved = float(meta.get("compile_seconds") or 0.0)
        except (OSError, ValueError, TypeError, AttributeError):
            meta, saved = {}, 0.0
        _report_cached_fallbacks(meta, self.warn)
        _stats.count_cache("hits")
        _stats.count_cache("hits_disk")
        _stats.count_cache("compile_seconds_saved", saved)
        _stats.persist(self.root, {"hits": 1, "compile_seconds_saved": saved})
        log.debug("cache hit %s (saved %.2fs)", entry.name[:12], saved)
        return fn

    def build(self, publish: orchestrate.Publish) -> Callable:
        job = self._job()
        _stats.count_cache("misses", root=self.root)
        log.debug("cache miss %s (%s)", job.key[:12], job.kind)
        t0 = time.perf_counter()
        artifact = job.compile_fn()  # raising here stores nothing
        elapsed = time.perf_counter() - t0
        _stats.count_cache("compile_seconds", elapsed)
        files: dict[str, str | bytes] = dict(artifact.sources)
        # compiled code beside the sources: a hit then skips compiling them (the key pins python)
        files.update(_runtime_loader().bytecode_files(artifact.sources))
        files.update(artifact.data)
        entry = publish(files, _complete_meta(artifact, job.gm, job.record, job.kind, elapsed), ())
        if entry is None:
            return _load_uncached(artifact)
        return _runtime_loader().load_dir(entry)

    def bypass(self, reason: str, message: str) -> Callable:
        orchestrate.warn_once(reason, self.root, message)
        _stats.count_cache("bypasses", reason=reason)
        return _load_uncached(self._job().compile_fn())

    def _job(self) -> "AtenJob":
        if self.job is None:
            raise RuntimeError("this ATen tier only loads entries; it was asked to compile")
        return self.job


@dataclass(frozen=True)
class AtenJob:
    """One ATen graph to compile on a miss: its key, key record and the compile itself."""

    gm: torch.fx.GraphModule
    record: dict
    key: str
    kind: str
    compile_fn: Callable[[], Artifact]


def compile_cached(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], kind: str, cfg: Any,
                   compile_fn: Callable[[], Artifact], record_into: _dynamo.Recording | None = None) -> Callable:
    """Return the compiled callable for ``gm``, compiling with ``compile_fn`` only on a miss.

    ``record_into``: the Dynamo-level recording this graph feeds (its ATen key is noted there), passed
    down explicitly from :func:`compile_dynamo_cached` through the backend's compilers."""
    if not cfg.cache:
        _stats.count_cache("bypasses", reason="disabled")
        return _load_uncached(compile_fn())
    record = make_record(gm, example_inputs, kind, cfg)
    key = key_of(record)
    _dynamo.note_key(record_into, kind, key)
    root = default_root(cfg)
    tier = AtenTier(root, cfg.fallback == "warn", AtenJob(gm, record, key, kind, compile_fn))
    return orchestrate.serve(tier, root, key, record, lock_timeout=cfg.cache_lock_timeout,
                             max_bytes=int(cfg.cache_max_bytes))


def _try_load(store: Store, key: str, warn: bool = True) -> Callable | None:
    """``key``'s ATen entry from ``store``, or None (a miss); never compiles."""
    return orchestrate.load(store, key, AtenTier(store.root, warn))


def _complete_meta(artifact: Artifact, gm: torch.fx.GraphModule, record: dict, kind: str,
                   elapsed: float) -> dict:
    """Fill what ``neuron-inductor cache list`` shows when the compiler did not say."""
    meta = dict(artifact.meta)
    meta.setdefault("compile_seconds", round(elapsed, 6))
    meta.setdefault("kind", kind)
    meta.setdefault("graph_name", getattr(gm, "_neuron_graph_name", None) or type(gm).__name__)
    meta.setdefault("summary", graph_summary(gm))
    ins = [i for i in record["inputs"] if "shape" in i]
    meta.setdefault("input_shapes", [i["shape"] for i in ins])
    meta.setdefault("input_dtypes", [i["dtype"] for i in ins])
    meta.setdefault("n_kernels", sum(s.count("@nki.jit") for s in artifact.sources.values()))
    meta.setdefault("python", sys.version.split()[0])
    return meta


def graph_summary(gm: torch.fx.GraphModule, top: int = 4) -> str:
    """E.g. ``"12 ops: mm x3, add x2, ..."``: enough to recognise a graph in a listing."""
    names = []
    for n in gm.graph.nodes:
        if n.op in ("call_function", "call_method", "call_module"):
            t = n.target
            name = t if isinstance(t, str) else getattr(t, "__name__", str(t))
            names.append(str(name).split(".")[0])
    common = collections.Counter(names).most_common(top)
    more = ", ..." if len(set(names)) > top else ""
    return f"{len(names)} ops: " + ", ".join(f"{n} x{c}" for n, c in common) + more


# -- the Dynamo-graph tier ---------------------------------------------------------------------------
class DynamoTier:
    """Entries of one ``plan.json`` naming the ATen entries that serve a Dynamo graph (a hit skips
    AOTAutograd). Not memoised: the runner is bound to this module's parameters. Not locked: its
    compile is AOTAutograd's, whose ATen graphs take their own locks."""

    memo, locked = False, False

    def __init__(self, gm: torch.fx.GraphModule, record: dict, root: Path, n_inputs: int,
                 aot_compile: Callable[[_dynamo.Recording | None], Callable], name: str, warn: bool) -> None:
        self.gm, self.record, self.root, self.n_inputs = gm, record, root, n_inputs
        self.aot_compile, self.name = aot_compile, name
        self.params = _dynamo.params_and_buffers(gm)
        self.fetches = AtenTier(root, warn)

    def load(self, entry: Path, fetch: orchestrate.Fetch) -> Callable | None:
        plan = validate.plan(validate.read_json(entry / PLAN))  # malformed: raises, quarantined
        if plan["n_inputs"] != self.n_inputs:
            return None
        fns = []
        for k in (plan["forward"], plan["backward"]):
            if k is not None:
                fn = fetch(k)
                if fn is None:  # an ATen entry was evicted or is corrupt: trace again
                    return None
                fns.append(fn)
        _stats.count_cache("dynamo_hits")
        _stats.persist(self.root, {"dynamo_hits": 1})
        if plan["mode"] == "inference":
            return _dynamo.inference_runner(fns[0], self.params, plan["n_inputs"], plan["n_outputs"])
        return _dynamo.training_runner(fns[0], fns[1], self.params, plan)

    def build(self, publish: orchestrate.Publish) -> Callable:
        rec = _dynamo.Recording()
        t0 = time.perf_counter()
        compiled = self.aot_compile(rec)
        elapsed = time.perf_counter() - t0

        def publish_plan() -> None:
            try:
                plan = _dynamo.plan_of(rec, self.n_inputs)
            except _dynamo.Bypass as e:
                _dynamo.count_bypass(str(e))
                return
            meta = _dynamo.meta_for(self.gm, self.record, elapsed, plan, self.name)
            served = [k for k in (plan["forward"], plan["backward"]) if k]
            if publish({PLAN: json.dumps(plan, indent=1, sort_keys=True)}, meta, served) is None:
                _dynamo.count_bypass("not_cached")
            else:
                _stats.count_cache("dynamo_misses", root=self.root)

        if "forward" in rec.keys and "backward" not in rec.keys and not rec.problem:
            rec.on_backward = publish_plan  # AOTAutograd compiles the backward at the first backward call
        else:
            publish_plan()
        return compiled

    def bypass(self, reason: str, message: str) -> Callable:
        return self.aot_compile(None)  # the ATen tier reports the fault for the graphs it compiles


def compile_dynamo_cached(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], cfg: Any,
                          aot_compile: Callable[[_dynamo.Recording | None], Callable],
                          name: str = "dynamo_graph") -> Callable:
    """Serve a Dynamo graph from its plan (skipping AOTAutograd), else run ``aot_compile(rec)`` and,
    when the graph qualifies (see ``dynamo.py``), store the plan naming the ATen entries it produced.

    ``rec`` is the :class:`~.dynamo.Recording` the ATen-level compiles of this graph must report into
    (``None`` when no Dynamo-level entry will be written); the caller hands it to its compilers."""
    if not cfg.cache:
        return aot_compile(None)
    try:
        record = _dynamo.make_record(gm, example_inputs, cfg)
    except _dynamo.Bypass as e:
        _dynamo.count_bypass(str(e))
        return aot_compile(None)
    except Exception as e:  # noqa: BLE001 - a graph we cannot key is compiled the usual way
        log.debug("no Dynamo-level key: %r", e)
        _dynamo.count_bypass("unkeyable")
        return aot_compile(None)
    root = default_root(cfg)
    n_inputs = len(_dynamo.params_and_buffers(gm)) + len(example_inputs)
    tier = DynamoTier(gm, record, root, n_inputs, aot_compile, name, cfg.fallback == "warn")
    return orchestrate.serve(tier, root, key_of(record), record)

__all__ = ["Artifact", "AtenJob", "AtenTier", "DynamoTier", "NeuronCacheWarning", "clear_memory", "compile_cached",
           "compile_dynamo_cached", "graph_summary"]
