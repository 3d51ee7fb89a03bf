"""Shape-keyed on-disk compile cache: every (graph, input shapes, config) is compiled once, ever.

Public surface: :func:`compile_cached` (the backend's seam), :class:`Artifact` (what a compile
produces), :func:`stats` (counters for this process). Layout and fault handling: ``store.py``;
the key record: ``key.py``; design notes: docs/design.md section 5.
"""
from .api import Artifact, NeuronCacheWarning, clear_memory, compile_cached, graph_summary
from .key import SCHEMA_VERSION, key_of, make_record
from .stats import reset_stats, stats
from .store import CacheSecurityError, Store, default_root

__all__ = ["Artifact", "CacheSecurityError", "NeuronCacheWarning", "SCHEMA_VERSION", "Store",
           "clear_memory", "compile_cached", "default_root", "graph_summary", "key_of",
           "make_record", "reset_stats", "stats"]
