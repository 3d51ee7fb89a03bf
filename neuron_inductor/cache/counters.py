"""The cache's counting, as the cache calls it: each event goes to :mod:`neuron_inductor.stats` (the
one home of every counter) and, with a cache directory, to its persisted ``stats.json``."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from .. import stats as _stats
from ..stats import STATS_FILE, persist, read_persisted  # noqa: F401  (the persisted counters)

log = logging.getLogger("neuron_inductor.cache")

_BY_REASON = ("bypasses", "dynamo_bypasses")


def reset_stats() -> None:
    """Zero the in-process cache counters (``neuron_inductor.stats.reset("cache")``)."""
    _stats.reset("cache")


def stats() -> dict[str, Any]:
    """The in-process cache counters (``neuron_inductor.stats.cache()``)."""
    return _stats.cache()


def count(event: str, n: float = 1, *, reason: str | None = None, root: Path | None = None) -> None:
    _stats.record_cache(event, n, reason=reason)
    log.debug("cache %s%s", event, f" ({reason})" if reason else "")
    if root is not None:
        persist(root, {event if event not in _BY_REASON else f"{event[:-2]}:{reason}": n})
