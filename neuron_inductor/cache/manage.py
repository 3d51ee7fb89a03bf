"""Cache maintenance as plain functions returning data: the CLI formats them, tests call them.

Nothing here executes cached code: listing, verifying, pruning, explaining, exporting and importing
only read manifests, records and bytes.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .schema import SCHEMA_VERSION, flatten, package_fingerprint
from .store import META, RECORD, CorruptEntry, EntryInfo, Store


def entry_row(e: EntryInfo) -> dict[str, Any]:
    """One ``list`` row: what a person needs to recognise an entry."""
    meta = e.read_json(META)
    record = e.read_json(RECORD) if not meta.get("input_shapes") else {}
    shapes = meta.get("input_shapes") or [i["shape"] for i in record.get("inputs", []) if "shape" in i]
    dtypes = meta.get("input_dtypes") or [i["dtype"] for i in record.get("inputs", []) if "dtype" in i]
    return {
        "key": e.key, "graph_name": meta.get("graph_name", "?"), "summary": meta.get("summary", ""),
        "kind": meta.get("kind", "?"), "input_shapes": shapes,
        "dtype": sorted({str(d).replace("torch.", "") for d in dtypes}),
        "n_kernels": meta.get("n_kernels"), "fallbacks": meta.get("fallbacks"),
        "size": e.size, "created": e.created, "last_hit": e.last_used if e.hits else None,
        "hits": e.hits, "compile_seconds": meta.get("compile_seconds"),
        "package_version": (e.manifest or {}).get("package_version"), "ok_manifest": e.manifest is not None,
        "path": str(e.path),
    }


def shape_text(shape: Iterable[Any]) -> str:
    return "x".join(str(s) for s in shape) or "scalar"


def matches(row: dict, shape: str | None, model: str | None, older_than: float | None,
            now: float | None = None) -> bool:
    if shape is not None:
        want = shape.replace(",", "x").replace(" ", "").strip("()[]")
        if not any(shape_text(s) == want for s in row["input_shapes"]):
            return False
    if model is not None and model.lower() not in f"{row['graph_name']} {row['summary']}".lower():
        return False
    if older_than is not None:
        last = max(row["created"], row["last_hit"] or 0)
        if (now or time.time()) - last < older_than:
            return False
    return True


def verify_all(store: Store) -> list[dict]:
    """``[{key, path, ok, problem}]`` for every entry, checksums included."""
    out = []
    for e in store.entries():
        try:
            store.verify(e.path)
            out.append({"key": e.key, "path": str(e.path), "ok": True, "problem": None})
        except CorruptEntry as exc:
            out.append({"key": e.key, "path": str(e.path), "ok": False, "problem": str(exc)})
    return out


@dataclass
class PrunePlan:
    remove: list[EntryInfo] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    other_dirs: list[Path] = field(default_factory=list)  # old schema dirs

    @property
    def bytes(self) -> int:
        return sum(e.size for e in self.remove) + sum(_du(p) for p in self.other_dirs)


def plan_prune(store: Store, max_size: int | None = None, older_than: float | None = None,
               old_versions: bool = False, now: float | None = None) -> PrunePlan:
    """Decide what ``prune`` removes; age and version first, then LRU down to ``max_size``."""
    now = now or time.time()
    plan = PrunePlan()
    infos = list(store.entries())
    current = package_fingerprint()
    for e in infos:
        if older_than is not None and now - e.last_used >= older_than:
            plan.reasons[e.key] = f"unused for {human_age(now - e.last_used)}"
        elif old_versions:
            pkg = e.read_json(RECORD).get("package")
            if pkg != current:
                plan.reasons[e.key] = f"built by neuron_inductor {(pkg or {}).get('version', '?')} " \
                                      "(other sources)"
    if old_versions:
        plan.other_dirs = [p for p in store.version_dirs() if p.name != f"v{SCHEMA_VERSION}"]
    if max_size is not None:
        left = sum(e.size for e in infos if e.key not in plan.reasons)
        for e in sorted(infos, key=lambda e: e.last_used):
            if left <= max_size:
                break
            if e.key not in plan.reasons:
                plan.reasons[e.key] = "least recently used (over --max-size)"
                left -= e.size
    plan.remove = [e for e in infos if e.key in plan.reasons]
    return plan


def apply_prune(store: Store, plan: PrunePlan) -> None:
    """Delete what ``plan`` lists; refuses (:class:`NotACacheError`) a root without the marker."""
    store.require_marker()
    for e in plan.remove:
        store.remove(e.path)
    for p in plan.other_dirs:
        store.remove_dir(p)
    store.sweep_temps()


def plan_clear(store: Store) -> tuple[list[EntryInfo], list[Path]]:
    """What ``clear`` removes: every entry of every schema, and the quarantine dir if present."""
    extra = [store.root / "quarantine"] if (store.root / "quarantine").is_dir() and \
        not (store.root / "quarantine").is_symlink() else []
    return list(store.entries(all_versions=True)), extra


def clear(store: Store) -> tuple[int, int]:
    """Remove every entry, temp dir and quarantined entry; lock and stats files stay (see store.py)."""
    store.require_marker()
    infos, extra = plan_clear(store)
    n, size = len(infos), sum(e.size for e in infos)
    for e in infos:
        store.remove(e.path)
    for p in extra:
        store.remove_dir(p)
    store.sweep_temps(max_age=0)
    return n, size


# -- explain ----------------------------------------------------------------------------------------
def diff_records(a: dict, b: dict) -> list[tuple[str, Any, Any]]:
    """Field-by-field differences ``(path, a_value, b_value)`` of two key records."""
    fa, fb = flatten(a), flatten(b)
    return [(k, fa.get(k, "<absent>"), fb.get(k, "<absent>")) for k in sorted(set(fa) | set(fb))
            if fa.get(k, "<absent>") != fb.get(k, "<absent>")]


def summarise_graph_diff(diff: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any]]:
    """Fold per-node graph differences into one row: the count and the first differing node.

    Once two graphs differ in one node, positions shift and every later node "differs"; a person
    needs the first difference, not hundreds of lines.
    """
    graph = [d for d in diff if d[0].startswith("graph[")]
    if len(graph) <= 1:
        return diff
    first = min(graph, key=lambda d: int(d[0][len("graph["):].split("]")[0]))
    rest = [d for d in diff if not d[0].startswith("graph[")]
    return rest + [(f"{first[0]} (first of {len(graph)} differing nodes)", first[1], first[2])]


def nearest(store: Store, record: dict, exclude: str | None = None) -> tuple[EntryInfo | None, list]:
    """The entry whose record differs from ``record`` in the fewest fields (newest wins a tie)."""
    best: tuple[int, float] | None = None
    best_entry, best_diff = None, []
    for e in store.entries():
        if e.key == exclude:
            continue
        other = e.read_json(RECORD)
        if not other:
            continue
        d = diff_records(record, other)
        score = (len(d), -e.created)
        if best is None or score < best:
            best, best_entry, best_diff = score, e, d
    return best_entry, best_diff


def flatten_record_for_show(record: dict) -> list[tuple[str, str]]:
    """The key record as readable ``(field, value)`` lines; graph nodes one per line."""
    out: list[tuple[str, str]] = []
    for k in ("schema", "target", "kind", "torch", "python"):
        out.append((k, str(record.get(k))))
    pkg = record.get("package") or {}
    out.append(("package", f"{pkg.get('version')} (sources {str(pkg.get('source_sha256'))[:16]})"))
    out.append(("config", json.dumps(record.get("config"), sort_keys=True)))
    for i, inp in enumerate(record.get("inputs", [])):
        out.append((f"inputs[{i}]", json.dumps(inp, sort_keys=True)))
    for i, line in enumerate(record.get("graph", [])):
        out.append((f"graph[{i}]", line))
    return out


# -- formatting helpers shared by the CLI -----------------------------------------------------------
_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": 1024**2, "mb": 1000**2,
          "mib": 1024**2, "g": 1024**3, "gb": 1000**3, "gib": 1024**3, "t": 1024**4, "tb": 1000**4,
          "tib": 1024**4}
_AGES = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_size(text: str) -> int:
    """``"10G"``, ``"500MiB"``, ``"1.5GB"``, ``"12345"`` -> bytes."""
    t = text.strip().lower()
    num = t.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = t[len(num):]
    bad = ValueError(f"bad size {text!r}: a non-negative number with an optional unit "
                     "(examples: 500M, 10G, 1.5GiB, 4096)")
    if not num or unit not in _UNITS:
        raise bad
    try:
        value = float(num) * _UNITS[unit]
    except ValueError:
        raise bad from None
    if not math.isfinite(value) or value < 0 or value >= 2**63:
        raise bad
    return int(value)


def parse_age(text: str) -> float:
    """``"7d"``, ``"12h"``, ``"30m"``, ``"2w"``, ``"90s"`` -> seconds (a bare number means days)."""
    t = text.strip().lower()
    unit = t[-1] if t and t[-1] in _AGES else "d"
    num = t[:-1] if t and t[-1] in _AGES else t
    bad = ValueError(f"bad age {text!r}: a non-negative number with an optional unit "
                     "(examples: 90s, 30m, 12h, 7d, 2w)")
    try:
        value = float(num) * _AGES[unit]
    except ValueError:
        raise bad from None
    if not math.isfinite(value) or value < 0:
        raise bad
    return value


def human_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def human_age(seconds: float) -> str:
    s = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.0f}{unit}"
    return f"{s:.0f}s"


def _du(p: Path) -> int:
    return sum(f.lstat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink())


__all__ = ["entry_row", "matches", "verify_all", "plan_prune", "apply_prune", "clear", "diff_records",
           "nearest", "summarise_graph_diff", "flatten_record_for_show", "parse_size", "parse_age",
           "human_size", "human_age", "shape_text", "plan_clear"]
