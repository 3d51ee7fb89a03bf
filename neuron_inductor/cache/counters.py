"""Cache counters: per process (``stats()``) and persisted per cache dir (``neuron-inductor cache stats``).

Tests assert on these counters instead of timing; users read them to see whether caching works at
all (like ``ccache -s``). The persisted file is updated under a short lock and is best effort: a
counter that cannot be written must never fail a compile.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("neuron_inductor.cache")

STATS_FILE = "stats.json"
_COUNTERS = ("hits", "hits_memory", "hits_disk", "misses", "quarantined", "evictions", "dynamo_hits",
             "dynamo_misses")
_BY_REASON = ("bypasses", "dynamo_bypasses")

_lock = threading.Lock()
_stats: dict[str, Any] = {}


def _fresh() -> dict[str, Any]:
    d: dict[str, Any] = {name: 0 for name in _COUNTERS}
    d["bypasses"] = {}
    d["dynamo_bypasses"] = {}
    d["compile_seconds_saved"] = 0.0
    d["compile_seconds"] = 0.0
    return d


def reset_stats() -> None:
    """Zero the in-process counters (tests call this between cases)."""
    global _stats
    with _lock:
        _stats = _fresh()


reset_stats()


def stats() -> dict[str, Any]:
    """A snapshot of this process's counters: hits, misses, bypasses by reason, quarantined, evictions,
    compile seconds saved (sum of the stored compile time of every entry served from the cache)."""
    with _lock:
        snap = dict(_stats)
        snap["bypasses"] = dict(_stats["bypasses"])
        snap["dynamo_bypasses"] = dict(_stats["dynamo_bypasses"])
        snap["bypassed"] = sum(snap["bypasses"].values())
    return snap


def count(event: str, n: float = 1, *, reason: str | None = None, root: Path | None = None) -> None:
    with _lock:
        if event in _BY_REASON:
            _stats[event][reason or "unknown"] = _stats[event].get(reason or "unknown", 0) + 1
        else:
            _stats[event] = _stats.get(event, 0) + n
    log.debug("cache %s%s", event, f" ({reason})" if reason else "")
    if root is not None:
        persist(root, {event if event not in _BY_REASON else f"{event[:-2]}:{reason}": n})


def persist(root: Path, deltas: dict[str, float]) -> None:
    """Add ``deltas`` to ``<root>/stats.json`` under the current package version."""
    try:
        from filelock import FileLock, Timeout

        from .schema import package_fingerprint

        version = package_fingerprint()["version"]
        path = Path(root) / STATS_FILE
        try:
            with FileLock(str(path) + ".lock", timeout=5, preserve_lock_file=True):
                data = read_persisted(root)
                bucket = data.setdefault(version, {})
                for name, n in deltas.items():
                    bucket[name] = round(bucket.get(name, 0) + n, 6)
                tmp = path.with_name(f".{STATS_FILE}.{os.getpid()}.tmp")
                tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
                os.replace(tmp, path)
        except Timeout:
            log.debug("stats lock busy; counter update dropped")
    except OSError as e:
        log.debug("could not persist cache stats: %s", e)


def read_persisted(root: Path) -> dict[str, dict[str, float]]:
    """``{package_version: {counter: value}}``; an unreadable file, or parts of the wrong shape, read
    as empty (counters are best effort, they must never fail a compile)."""
    try:
        data = json.loads((Path(root) / STATS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(v): {str(k): n for k, n in c.items()
                     if isinstance(n, (int, float)) and not isinstance(n, bool) and n == n}
            for v, c in data.items() if isinstance(c, dict)}
