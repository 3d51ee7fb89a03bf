"""The torch-free half of the key: schema version, package fingerprint, hashing, flattening.

Kept apart from ``key.py`` so the ``neuron-inductor cache`` commands never import torch (seconds of
start-up for a command that only reads JSON files).
"""
from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


@functools.lru_cache(maxsize=1)
def package_fingerprint() -> dict[str, str]:
    """Version plus a hash of our own sources, computed once per process.

    The version alone is not enough: an editable install changes code without bumping it, and a
    stale kernel from older codegen must never be served.
    """
    import neuron_inductor

    pkg_root = Path(neuron_inductor.__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(pkg_root.rglob("*.py")):
        rel = path.relative_to(pkg_root).as_posix()
        if "__pycache__" in rel:
            continue
        h.update(rel.encode() + b"\0")
        try:
            h.update(path.read_bytes())
        except OSError:  # a file vanishing mid-scan (concurrent edit) must not break compiles
            h.update(b"<unreadable>")
        h.update(b"\0")
    return {"version": neuron_inductor.__version__, "source_sha256": h.hexdigest()}


def canonical_json(record: dict) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def key_of(record: dict) -> str:
    return hashlib.sha256(canonical_json(record).encode()).hexdigest()


def flatten(record: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted paths to leaves; ``explain`` diffs these."""
    out: dict[str, Any] = {}
    if isinstance(record, dict):
        for k, v in record.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(record, list):
        for i, v in enumerate(record):
            out.update(flatten(v, f"{prefix}[{i}]"))
        if not record:
            out[prefix] = []
        out[f"{prefix}.len" if prefix else "len"] = len(record)
    else:
        out[prefix] = record
    return out
