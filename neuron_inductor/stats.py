"""Every counter the package keeps, in one place: compiles, declared fallbacks, the cache, host calls.

Tests assert on these instead of timing, and users read them to see whether compiling and caching
work at all. Four sections, each with a snapshot function:

* :func:`compiled`: graphs compiled, kernels generated, ATen ops seen, hand-written kernel calls,
  declared collectives, whole graphs that fell back to eager (``graph_fallbacks``);
* :func:`fallback_ops`: ops the compiler declared as fallbacks, by op name, counted once per
  compiled graph (``"<whole forward graph>"`` for a graph fallback);
* :func:`cache`: cache hits (memory, disk), misses, bypasses by reason, quarantined entries,
  evictions, compile seconds spent and saved; also persisted per cache directory
  (:func:`read_persisted`, which ``neuron-inductor cache stats`` prints);
* :func:`host_calls`: calls the generated wrappers made at run time, by op: declared fallbacks
  (``"fallbacks"``), declared collectives (``"collectives"``, not a missing lowering) and CPU
  tensors copied to the device at a graph boundary (``"boundary_copies"``).

:func:`snapshot` returns all of them; :func:`reset` zeroes one section or all. The ``record_*``
functions are what the stages call. This is a leaf module (it imports no pipeline stage), so any stage
may count into it; counting is thread-safe and never raises.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

log = logging.getLogger("neuron_inductor")

SECTIONS = ("compile", "fallback_ops", "cache", "host")

#: compile counters (a live view: prefer :func:`compiled`)
COMPILE: Counter = Counter()
#: declared fallbacks by op (a live view: prefer :func:`fallback_ops`)
FALLBACK_OPS: Counter = Counter()

_CACHE_COUNTERS = ("hits", "hits_memory", "hits_disk", "misses", "quarantined", "evictions",
                   "dynamo_hits", "dynamo_misses")
_CACHE_BY_REASON = ("bypasses", "dynamo_bypasses")

_lock = threading.Lock()
_cache: dict[str, Any] = {}
_host: dict[str, dict[str, int]] = {"fallbacks": {}, "collectives": {}, "boundary_copies": {}}


def _fresh_cache() -> dict[str, Any]:
    d: dict[str, Any] = {name: 0 for name in _CACHE_COUNTERS}
    d.update(bypasses={}, dynamo_bypasses={}, compile_seconds_saved=0.0, compile_seconds=0.0)
    return d


# ----------------------------------------------------------------------------- reading

def compiled() -> Counter:
    """Compile counters of this process (a copy; a counter never incremented reads 0)."""
    with _lock:
        return Counter(COMPILE)


def fallback_ops() -> Counter:
    """Declared fallbacks found while compiling, by op name (a copy; empty when there were none)."""
    with _lock:
        return Counter(FALLBACK_OPS)


def cache() -> dict[str, Any]:
    """Cache counters of this process: hits, misses, bypasses by reason (and their total,
    ``bypassed``), quarantined, evictions, compile seconds spent and saved."""
    with _lock:
        snap = dict(_cache)
        snap["bypasses"] = dict(_cache["bypasses"])
        snap["dynamo_bypasses"] = dict(_cache["dynamo_bypasses"])
    snap["bypassed"] = sum(snap["bypasses"].values())
    return snap


def host_calls() -> dict[str, dict[str, int]]:
    """Run-time host calls made by generated wrappers: ``{"fallbacks": {op: n}, "collectives": {op: n}}``."""
    with _lock:
        return {k: dict(v) for k, v in _host.items()}


def summary() -> str:
    """One line a user can read to see what the backend did in this process: graphs compiled and
    loaded from the cache, kernels generated, graphs that fell back whole, declared fallback ops."""
    c, fb, ca = compiled(), fallback_ops(), cache()
    ops = ", ".join(f"{op} x{n}" for op, n in sorted(fb.items())) or "none"
    return (f"graphs compiled {c['graphs_compiled']} (cache hits {ca['hits']}), kernels generated "
            f"{c['kernels_generated']} from {c['aten_ops']} ATen ops, whole-graph fallbacks "
            f"{c['graph_fallbacks']}, declared fallback ops: {ops}")


def snapshot() -> dict[str, Any]:
    """Every section: ``{"compile", "fallback_ops", "cache", "host"}``."""
    return {"compile": compiled(), "fallback_ops": fallback_ops(), "cache": cache(), "host": host_calls()}


def reset(*sections: str) -> None:
    """Zero the named sections (all of them when none is named); tests call this between cases."""
    global _cache
    bad = [s for s in sections if s not in SECTIONS]
    if bad:
        raise ValueError(f"unknown stats sections {bad}; sections: {SECTIONS}")
    todo = sections or SECTIONS
    with _lock:
        if "compile" in todo:
            COMPILE.clear()
        if "fallback_ops" in todo:
            FALLBACK_OPS.clear()
        if "cache" in todo:
            _cache = _fresh_cache()
        if "host" in todo:
            for v in _host.values():
                v.clear()


reset()


# ----------------------------------------------------------------------------- recording

def record_compile(**deltas: int) -> None:
    """Add to compile counters, e.g. ``record_compile(graphs_compiled=1, kernels_generated=3)``."""
    with _lock:
        COMPILE.update(deltas)


def record_fallback_op(op: str, n: int = 1) -> None:
    with _lock:
        FALLBACK_OPS[op] += n


def report_fallbacks(graph: str, fallbacks: list[tuple[str, str, str]], warn: bool,
                     cached: bool = False) -> None:
    """Count a graph's declared fallbacks (op, shapes, reason) and, with ``warn``, log them once.

    Called when a graph is compiled and when it is loaded from the on-disk cache in a new process,
    so a warm cache reports the same host ops a cold compile does."""
    for op, _shapes, _reason in fallbacks:
        record_fallback_op(op)
    if fallbacks and warn:
        lines = "\n".join(f"  {op}({shapes}): {reason}" for op, shapes, reason in fallbacks)
        log.warning("neuron_inductor: graph %s%s runs %d op(s) eagerly on the host (declared "
                    "fallbacks):\n%s", graph, " (from the compile cache)" if cached else "",
                    len(fallbacks), lines)


def record_cache(event: str, n: float = 1, *, reason: str | None = None) -> None:
    """One cache event (``hits``, ``misses``, ``bypasses`` with a ``reason``...) in this process."""
    with _lock:
        if event in _CACHE_BY_REASON:
            by = _cache[event]
            by[reason or "unknown"] = by.get(reason or "unknown", 0) + 1
        else:
            _cache[event] = _cache.get(event, 0) + n


def count_cache(event: str, n: float = 1, *, reason: str | None = None, root: Path | None = None) -> None:
    """One cache event, as the cache reports it: counted in this process and, with the cache
    directory ``root``, added to its persisted ``stats.json`` (bypasses by ``kind:reason``)."""
    record_cache(event, n, reason=reason)
    logging.getLogger("neuron_inductor.cache").debug("cache %s%s", event, f" ({reason})" if reason else "")
    if root is not None:
        persist(root, {event if event not in _CACHE_BY_REASON else f"{event[:-2]}:{reason}": n})


def record_host_call(kind: str, op: str) -> None:
    """One run-time host call of ``op``: ``kind`` is ``"fallbacks"``, ``"collectives"`` or
    ``"boundary_copies"`` (a CPU input or constant copied to the device at a graph's boundary)."""
    with _lock:
        calls = _host[kind]
        calls[op] = calls.get(op, 0) + 1


# ----------------------------------------------------------------------------- persisted (per cache dir)

STATS_FILE = "stats.json"


def persist(root: Path, deltas: dict[str, float]) -> None:
    """Add ``deltas`` to ``<root>/stats.json`` under the current package version. Updated under a
    short lock and best effort: a counter that cannot be written must never fail a compile."""
    try:
        from filelock import FileLock, Timeout

        from neuron_inductor import __version__ as version

        path = Path(root) / STATS_FILE
        try:
            with FileLock(str(path) + ".lock", timeout=5, preserve_lock_file=True):
                data = read_persisted(root)
                bucket = data.setdefault(version, {})
                for name, n in deltas.items():
                    bucket[name] = round(bucket.get(name, 0) + n, 6)
                tmp = path.with_name(f".{STATS_FILE}.{os.getpid()}.tmp")
                # never through a link someone planted at the temp name
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(json.dumps(data, indent=1, sort_keys=True))
                os.replace(tmp, path)
        except Timeout:
            log.debug("stats lock busy; counter update dropped")
    except OSError as e:
        log.debug("could not persist cache stats: %s", e)


def read_persisted(root: Path) -> dict[str, dict[str, float]]:
    """``{package_version: {counter: value}}`` of a cache directory; an unreadable file, or parts of
    the wrong shape, read as empty (counters are best effort, they must never fail a compile).

    Bounded: at most :data:`STATS_MAX_BYTES`, never through a symlink, and only counters that are
    finite non-negative numbers below 2**53 are kept (no "inf hits", no "-5 misses"); a deeply
    nested file fails to parse (``RecursionError``) and reads as empty too."""
    try:
        fd = os.open(Path(root) / STATS_FILE, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            raw = f.read(STATS_MAX_BYTES + 1)
        if len(raw) > STATS_MAX_BYTES or raw.count(b"[") + raw.count(b"{") > 10_000:
            return {}
        data = json.loads(raw)
    except (OSError, ValueError, RecursionError, MemoryError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(v)[:64]: {str(k)[:64]: n for k, n in c.items() if _is_count(n)}
            for v, c in data.items() if isinstance(c, dict)}


STATS_MAX_BYTES = 1 << 20


def _is_count(n: object) -> bool:
    return isinstance(n, (int, float)) and not isinstance(n, bool) and 0 <= n < 2**53
