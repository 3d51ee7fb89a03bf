"""``compile_cached``: the one seam between the backend and the cache.

A hit (memory, then disk) returns the loaded module without calling ``compile_fn``, so nothing of
decomposition, fusion, lowering or codegen runs. A miss compiles under a per-key file lock (one
compile per key across processes and ranks) and publishes the entry atomically. Every cache fault
degrades to an uncached compile with a warning: a cache must never fail a training step. The one
exception is a cache dir that others can write: loading code from it would be a security hole, so
that is a hard, explained error.
"""
from __future__ import annotations

import collections
import json
import logging
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch.fx

from .. import stats
from .. import stats as _stats
from . import dynamo as _dynamo
from . import validate
from .key import key_of, make_record
from .store import META, PLAN, CorruptEntry, Store, default_root

log = logging.getLogger("neuron_inductor.cache")


class NeuronCacheWarning(UserWarning):
    """A cache fault that was worked around (the run continues uncached or recompiles)."""


@dataclass
class Artifact:
    """What a compile produces: generated sources by file name, JSON-able metadata, and ``data``:
    JSON files the entry keeps beside them (``program.json``: the program the sources were
    generated from, what ``cache import`` regenerates them from on another machine)."""

    sources: dict[str, str]
    meta: dict = field(default_factory=dict)
    data: dict[str, str] = field(default_factory=dict)


_memory: dict[tuple[str, str], Callable] = {}
_warned: set[tuple[str, str]] = set()
_swept: set[str] = set()
_mutex = threading.Lock()


def clear_memory() -> None:
    """Forget the in-process tier and the warn-once memory (tests; a fresh process does this too)."""
    with _mutex:
        _memory.clear()
        _warned.clear()
        _swept.clear()


def _warn_once(reason: str, root: Path, message: str) -> None:
    with _mutex:
        if (reason, str(root)) in _warned:
            log.debug("%s", message)
            return
        _warned.add((reason, str(root)))
    warnings.warn(message, NeuronCacheWarning, stacklevel=3)


# -- loading ----------------------------------------------------------------------------------------
def _runtime_loader() -> Any:
    """Imported lazily: the runtime pulls in the simulator, which a cache-only tool never needs."""
    from neuron_inductor.runtime import loader

    return loader


def _load_uncached(artifact: Artifact) -> Callable:
    return _runtime_loader().load_sources(dict(artifact.sources))


# -- the seam ---------------------------------------------------------------------------------------
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
    mem = _memory.get((str(root), key))
    if mem is not None:
        _stats.count_cache("hits")
        _stats.count_cache("hits_memory")
        return mem

    try:
        store = Store(root)
    except OSError as e:
        return _bypass("unwritable", root, f"compile cache dir {root} is unusable ({e}); "
                       "compiling without the cache", compile_fn)
    if str(root) not in _swept:
        _swept.add(str(root))
        n = store.sweep_temps()
        if n:
            log.debug("swept %d stale temp dir(s) in %s", n, root)

    hit = _try_load(store, key, cfg.fallback == "warn")
    if hit is not None:
        return hit

    from filelock import FileLock, Timeout

    try:
        store.ensure_parent(key)
        lock = FileLock(str(store.lock_path(key)), timeout=cfg.cache_lock_timeout,
                        preserve_lock_file=True)
        lock.acquire()
    except Timeout:
        return _bypass("lock_timeout", root, f"timed out after {cfg.cache_lock_timeout}s waiting "
                       f"for another process compiling graph {key[:12]}; compiling without the cache "
                       "(raise NEURON_INDUCTOR_CACHE_LOCK_TIMEOUT if compiles are slow)", compile_fn)
    except OSError as e:
        return _bypass("unwritable", root, f"compile cache dir {root} is not writable ({e}); "
                       "compiling without the cache", compile_fn)
    try:
        hit = _try_load(store, key, cfg.fallback == "warn")  # the process we waited for may have published it
        if hit is not None:
            return hit
        _stats.count_cache("misses", root=root)
        log.debug("cache miss %s (%s)", key[:12], kind)
        t0 = time.perf_counter()
        artifact = compile_fn()  # raising here stores nothing; the lock is released below
        elapsed = time.perf_counter() - t0
        _stats.count_cache("compile_seconds", elapsed)
        meta = _complete_meta(artifact, gm, record, kind, elapsed)
        files: dict[str, str | bytes] = dict(artifact.sources)
        # compiled code beside the sources: a hit then skips compiling them (the key pins python)
        files.update(_runtime_loader().bytecode_files(artifact.sources))
        files.update(artifact.data)
        try:
            entry = store.write(key, record, files, meta)
        except OSError as e:
            _warn_once("write_failed", root, f"could not write compile cache entry in {root} ({e}); "
                       "continuing without caching this graph")
            _stats.count_cache("bypasses", reason="write_failed")
            return _load_uncached(artifact)
        evicted = store.evict(int(cfg.cache_max_bytes), keep=key)
        if evicted:
            _stats.count_cache("evictions", len(evicted), root=root)
        fn = _runtime_loader().load_dir(entry)
        _memory[(str(root), key)] = fn
        return fn
    finally:
        lock.release()


def _bypass(reason: str, root: Path, message: str, compile_fn: Callable[[], Artifact]) -> Callable:
    _warn_once(reason, root, message)
    _stats.count_cache("bypasses", reason=reason)
    return _load_uncached(compile_fn())


def _lookup(store: Store, key: str) -> Path | None:
    """The verified entry directory of ``key``, or None on a miss; a corrupt entry is quarantined
    (by the store), counted and reported once, and is a miss."""
    try:
        found = store.lookup(key)
    except CorruptEntry as e:
        _stats.count_cache("quarantined", root=store.root)
        _warn_once(f"corrupt:{key}", store.root, f"corrupt compile cache entry quarantined, "
                   f"recompiling: {e}")
        return None
    return None if found is None else found[0]


def _report_cached_fallbacks(meta: Any, warn: bool) -> None:
    """The declared fallbacks the entry's compile reported, reported again in this process (a
    graph loaded from disk runs the same host ops). Malformed metadata reports nothing."""
    if not isinstance(meta, dict) or not isinstance(meta.get("fallbacks"), list):
        return
    found = [(str(f.get("op"))[:200], str(f.get("shapes"))[:400], str(f.get("reason"))[:400])
             for f in meta["fallbacks"] if isinstance(f, dict)]
    stats.report_fallbacks(str(meta.get("graph_name", "?"))[:200], found, warn, cached=True)


def _configuration_error() -> bool:
    """Whether kernels cannot run in this process at all (e.g. ``runtime='device'`` without its
    toolchain): a load failure then says nothing about the entry, which must not be quarantined."""
    try:
        from neuron_inductor.runtime import nki

        return nki.explain()["mode"] == "unavailable"
    except Exception:  # noqa: BLE001 - cannot tell: treat the entry as the problem
        return False


def _try_load(store: Store, key: str, warn: bool = True) -> Callable | None:
    entry = _lookup(store, key)
    if entry is None:
        return None
    from neuron_inductor.runtime.nki import RuntimeUnavailable

    try:
        fn = _runtime_loader().load_dir(entry)
    except RuntimeUnavailable:  # a configuration error about this machine, not about the entry
        raise
    except Exception as e:  # verified bytes that no longer load: treat like corruption
        if _configuration_error():  # the entry is fine; this process cannot run kernels
            raise
        store.quarantine(entry)
        _stats.count_cache("quarantined", root=store.root)
        _warn_once(f"corrupt:{key}", store.root, f"compile cache entry {entry} failed to load ({e!r}); "
                   "quarantined, recompiling")
        return None
    store.touch_hit(entry)
    try:  # verify() checked the shape: a number or absent
        meta = validate.read_json(entry / META)
        saved = float(meta.get("compile_seconds") or 0.0)
    except (OSError, ValueError, TypeError, AttributeError):
        meta, saved = {}, 0.0
    _report_cached_fallbacks(meta, warn)
    _stats.count_cache("hits")
    _stats.count_cache("hits_disk")
    _stats.count_cache("compile_seconds_saved", saved)
    _stats.persist(store.root, {"hits": 1, "compile_seconds_saved": saved})
    log.debug("cache hit %s (saved %.2fs)", key[:12], saved)
    _memory[(str(store.root), key)] = fn
    return fn


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
    key = key_of(record)
    root = default_root(cfg)
    params = _dynamo.params_and_buffers(gm)
    n_inputs = len(params) + len(example_inputs)
    try:
        store = Store(root)
    except OSError:
        return aot_compile(None)  # compile_cached reports the unusable dir
    fn = _dynamo_hit(store, key, params, n_inputs)
    if fn is not None:
        return fn
    rec = _dynamo.Recording()
    t0 = time.perf_counter()
    compiled = aot_compile(rec)
    elapsed = time.perf_counter() - t0

    def publish() -> None:
        try:
            plan = _dynamo.plan_of(rec, n_inputs)
            if not all(store.entry_dir(k).is_dir() for k in (plan["forward"], plan["backward"]) if k):
                raise _dynamo.Bypass("not_cached")
        except _dynamo.Bypass as e:
            _dynamo.count_bypass(str(e))
            return
        meta = _dynamo.meta_for(gm, record, elapsed, plan, name)
        try:
            store.write(key, record, {PLAN: json.dumps(plan, indent=1, sort_keys=True)}, meta)
            _stats.count_cache("dynamo_misses", root=root)
        except OSError as e:
            log.debug("could not store the Dynamo-level entry: %s", e)

    if "forward" in rec.keys and "backward" not in rec.keys and not rec.problem:
        rec.on_backward = publish  # AOTAutograd compiles the backward at the first backward call
    else:
        publish()
    return compiled


def _dynamo_hit(store: Store, key: str, params: list, n_inputs: int) -> Callable | None:
    entry = _lookup(store, key)
    if entry is None:
        return None
    try:
        plan = validate.plan(validate.read_json(entry / PLAN))
    except (OSError, ValueError) as e:
        store.quarantine(entry)
        _warn_once(f"corrupt:{key}", store.root, f"corrupt compile cache entry {entry} ({e}); "
                   "quarantined, recompiling")
        return None
    if plan["n_inputs"] != n_inputs:
        return None
    fns = []
    for k in (plan["forward"], plan["backward"]):
        if k is not None:
            fn = _memory.get((str(store.root), k))
            if fn is not None:
                _stats.count_cache("hits")
                _stats.count_cache("hits_memory")
            else:
                fn = _try_load(store, k)
            if fn is None:  # an ATen entry was evicted or is corrupt: trace again
                return None
            fns.append(fn)
    store.touch_hit(entry)
    _stats.count_cache("dynamo_hits")
    _stats.persist(store.root, {"dynamo_hits": 1})
    if plan["mode"] == "inference":
        return _dynamo.inference_runner(fns[0], params, plan["n_inputs"], plan["n_outputs"])
    return _dynamo.training_runner(fns[0], fns[1], params, plan)
