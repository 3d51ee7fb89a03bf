"""Shape-keyed on-disk compile cache: every (graph, input shapes, config) is compiled once, ever.

Public surface: :func:`compile_cached` (the ATen-level seam, used by ``compile.py``),
:func:`compile_dynamo_cached` (the Dynamo-level seam, used by ``backend.py``: a hit skips
AOTAutograd), :class:`Artifact` (what a compile produces), :func:`stats` (counters for this process).
Both seams are one flow, ``orchestrate.serve`` (memory -> verified entry -> per-key lock -> compile
-> publish), given a tier that says what its entries hold. Layout and fault handling: ``store.py``;
the key records: ``key.py`` and ``dynamo.py``; the strict file schemas: ``validate.py``; maintenance
used by the CLI: ``manage.py``; export/import (data only, sources regenerated on import):
``transfer.py``, ``tario.py`` and ``regen.py``; user documentation: docs/cache.md.

Names are resolved lazily so ``neuron-inductor cache ...`` (which only reads files) never pays for
importing torch.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Artifact": "api", "NeuronCacheWarning": "orchestrate", "clear_memory": "orchestrate",
    "compile_cached": "api",
    "graph_summary": "api", "make_record": "key", "SCHEMA_VERSION": "schema", "key_of": "schema",
    "package_fingerprint": "schema",
    "CacheSecurityError": "store", "Store": "store", "default_root": "store",
    "compile_dynamo_cached": "api",
}

__all__ = sorted([*_EXPORTS, "reset_stats", "stats"])


def stats() -> dict[str, Any]:
    """The in-process cache counters (the ``cache`` section of :mod:`neuron_inductor.stats`)."""
    from .. import stats as _stats
    return _stats.cache()


def reset_stats() -> None:
    """Zero the in-process cache counters (``neuron_inductor.stats.reset("cache")``)."""
    from .. import stats as _stats
    _stats.reset("cache")


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'neuron_inductor.cache' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value
