"""One orchestrator for both cache tiers: memory -> disk lookup -> (per-key lock) -> compile -> publish.

The two tiers (``api.py``: generated sources per ATen graph; a plan per Dynamo graph naming ATen
entries) differ only in what an entry holds, how it is turned into a callable, and when it can be
published: an ATen entry right after its compile, a training Dynamo entry once AOTAutograd has
compiled the backward (at the first backward call). A :class:`Tier` says exactly that; everything
that touches the store — verification, quarantine of corrupt entries, the per-key file lock, atomic
publication, eviction, the in-process tier — happens here, once, over :class:`~.store.Store`'s plain
lookup/write/quarantine API. Nothing here calls back into the compiler except ``Tier.build``.

Every cache fault degrades to an uncached compile with a warning (``Tier.bypass``): a cache must
never fail a training step. A cache dir that others can write is the one hard error
(``CacheSecurityError`` from the store): loading code from it would be a security hole.
"""
from __future__ import annotations

import logging
import threading
import warnings
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from .. import stats as _stats
from .store import CorruptEntry, Store

log = logging.getLogger("neuron_inductor.cache")

#: ``publish(files, meta, requires)``: write the entry (``requires``: keys of entries that must still
#: exist for it to be servable); returns its directory, or None when it was not written
Publish = Callable[[dict, dict, Sequence[str]], "Path | None"]
#: ``fetch(key)``: the callable of another ATen entry in the same store, or None (never compiles)
Fetch = Callable[[str], "Callable | None"]


class NeuronCacheWarning(UserWarning):
    """A cache fault that was worked around (the run continues uncached or recompiles)."""


class Tier(Protocol):
    """What one cache tier contributes to :func:`serve`."""

    #: memoise loaded callables in-process by (root, key) (not for callables bound to one module's
    #: parameters, like the Dynamo tier's runners)
    memo: bool
    #: compile under the key's file lock (one compile per key across processes and ranks)
    locked: bool
    #: the tier that serves the entries this tier's entries name (``Fetch``), if any
    fetches: "Tier | None"

    def load(self, entry: Path, fetch: Fetch) -> Callable | None:
        """A verified entry directory as a callable; None when this process cannot serve it (a
        miss); raising means the entry is unusable and is quarantined."""

    def build(self, publish: Publish) -> Callable:
        """Compile (a miss), publish the entry now or later through ``publish``, return the callable."""

    def bypass(self, reason: str, message: str) -> Callable:
        """Compile without the cache after a fault (``reason`` is the counter, ``message`` the warning)."""


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


def warn_once(reason: str, root: Path, message: str) -> None:
    """One warning per (fault, cache dir) and process: a fault repeats for every graph."""
    with _mutex:
        if (reason, str(root)) in _warned:
            log.debug("%s", message)
            return
        _warned.add((reason, str(root)))
    warnings.warn(message, NeuronCacheWarning, stacklevel=4)


def remembered(root: Path, key: str) -> Callable | None:
    """The in-process tier: a callable loaded or compiled earlier in this process."""
    fn = _memory.get((str(root), key))
    if fn is not None:
        _stats.count_cache("hits")
        _stats.count_cache("hits_memory")
    return fn


def serve(tier: Tier, root: Path, key: str, record: dict, *, lock_timeout: float | None = None,
          max_bytes: int | None = None) -> Callable:
    """The callable for ``key``: from memory, else from a verified entry, else ``tier.build`` (under
    the key's lock when the tier asks for it) publishing the new entry."""
    if tier.memo:
        mem = remembered(root, key)
        if mem is not None:
            return mem
    try:
        store = Store(root)
    except OSError as e:
        return tier.bypass("unwritable", f"compile cache dir {root} is unusable ({e}); compiling "
                           "without the cache")
    if str(root) not in _swept:
        _swept.add(str(root))
        n = store.sweep_temps()
        if n:
            log.debug("swept %d stale temp dir(s) in %s", n, root)
    hit = load(store, key, tier)
    if hit is not None:
        return hit
    if tier.locked:
        return _build_locked(store, key, record, tier, lock_timeout, max_bytes)
    return _build(store, key, record, tier, max_bytes)


def _build(store: Store, key: str, record: dict, tier: Tier, max_bytes: int | None) -> Callable:
    fn = tier.build(_publisher(store, key, record, tier, max_bytes))  # raising stores nothing
    if tier.memo:
        remember(store.root, key, fn)
    return fn


def _build_locked(store: Store, key: str, record: dict, tier: Tier, lock_timeout: float | None,
                  max_bytes: int | None) -> Callable:
    from filelock import FileLock, Timeout

    try:
        store.ensure_parent(key)
        lock = FileLock(str(store.lock_path(key)), timeout=lock_timeout, preserve_lock_file=True)
        lock.acquire()
    except Timeout:
        return tier.bypass("lock_timeout", f"timed out after {lock_timeout}s waiting for another "
                           f"process compiling graph {key[:12]}; compiling without the cache (raise "
                           "NEURON_INDUCTOR_CACHE_LOCK_TIMEOUT if compiles are slow)")
    except OSError as e:
        return tier.bypass("unwritable", f"compile cache dir {store.root} is not writable ({e}); "
                           "compiling without the cache")
    try:
        hit = load(store, key, tier)  # the process we waited for may have published it
        if hit is not None:
            return hit
        return _build(store, key, record, tier, max_bytes)
    finally:
        lock.release()


def _publisher(store: Store, key: str, record: dict, tier: Tier, max_bytes: int | None) -> Publish:
    def publish(files: dict, meta: dict, requires: Sequence[str] = ()) -> Path | None:
        if not all(store.entry_dir(k).is_dir() for k in requires):
            return None
        try:
            entry = store.write(key, record, files, meta)
        except OSError as e:
            warn_once("write_failed", store.root, f"could not write compile cache entry in "
                      f"{store.root} ({e}); continuing without caching this graph")
            _stats.count_cache("bypasses", reason="write_failed")
            return None
        if max_bytes is not None:
            evicted = store.evict(int(max_bytes), keep=key)
            if evicted:
                _stats.count_cache("evictions", len(evicted), root=store.root)
        return entry
    return publish


def remember(root: Path, key: str, fn: Callable) -> None:
    """Put a callable in the in-process tier."""
    _memory[(str(root), key)] = fn


def lookup(store: Store, key: str) -> Path | None:
    """The verified entry directory of ``key``, or None on a miss; a corrupt entry is quarantined
    (by the store), counted and reported once, and is a miss."""
    try:
        found = store.lookup(key)
    except CorruptEntry as e:
        _stats.count_cache("quarantined", root=store.root)
        warn_once(f"corrupt:{key}", store.root, f"corrupt compile cache entry quarantined, recompiling: {e}")
        return None
    return None if found is None else found[0]


def load(store: Store, key: str, tier: Tier) -> Callable | None:
    """``key``'s entry through ``tier.load``; an entry whose verified bytes no longer load is
    quarantined like a corrupt one, unless the failure is about this process (see
    :func:`_configuration_error`), which is raised."""
    entry = lookup(store, key)
    if entry is None:
        return None
    from neuron_inductor.runtime.nki import RuntimeUnavailable

    try:
        fn = tier.load(entry, lambda k: _fetch(store, k, tier))
    except RuntimeUnavailable:  # a configuration error about this machine, not about the entry
        raise
    except Exception as e:  # verified bytes that no longer load: treat like corruption
        if _configuration_error():  # the entry is fine; this process cannot run kernels
            raise
        store.quarantine(entry)
        _stats.count_cache("quarantined", root=store.root)
        warn_once(f"corrupt:{key}", store.root, f"compile cache entry {entry} failed to load ({e!r}); "
                  "quarantined, recompiling")
        return None
    if fn is not None:
        store.touch_hit(entry)
        if tier.memo:
            remember(store.root, key, fn)
    return fn


def _fetch(store: Store, key: str, tier: Tier) -> Callable | None:
    """Another entry of the store, served by the tier the requesting tier names (``fetches``)."""
    inner = tier.fetches
    if inner is None:
        return None
    return remembered(store.root, key) or load(store, key, inner)


def _configuration_error() -> bool:
    """Whether kernels cannot run in this process at all (e.g. ``runtime='device'`` without its
    toolchain): a load failure then says nothing about the entry, which must not be quarantined."""
    try:
        from neuron_inductor.runtime import nki

        return nki.explain()["mode"] == "unavailable"
    except Exception:  # noqa: BLE001 - cannot tell: treat the entry as the problem
        return False


__all__ = ["Fetch", "NeuronCacheWarning", "Publish", "Tier", "clear_memory", "load", "lookup",
           "remember", "remembered", "serve", "warn_once"]
