"""Strict shapes for every JSON file the cache reads back: manifest, record, meta, plan.

A file that parses as JSON but has the wrong shape (``[]``, a string where an object belongs, a
negative size) is corruption like a bad checksum: the caller quarantines the entry and recompiles.
Checking the shape here, once, is what keeps a ``.get`` on a list from turning into a traceback in
``cache list`` or a permanent eager fallback at compile time. Torch-free: the CLI uses it.
"""
from __future__ import annotations

import json
import math
import os
import re
from typing import Any

HEX64 = re.compile(r"^[0-9a-f]{64}$")
HEX2 = re.compile(r"^[0-9a-f]{2}$")
VERSION_DIR = re.compile(r"^v[0-9]+$")

MANIFEST = "manifest.json"
RECORD = "record.json"
META = "meta.json"
PLAN = "plan.json"
PROGRAM = "program.json"
HITS = "hits"
SOURCE_FILES = ("kernels.py", "wrapper.py")
_BYTECODE = re.compile(r"^(kernels|wrapper)\.[a-z0-9_]+-[0-9]+\.code$")

#: what a run of the compiler can put in an entry (the manifest lists all but itself)
ENTRY_FILES = frozenset({*SOURCE_FILES, RECORD, META, PLAN, PROGRAM})
#: the files an archive may carry for an entry: data only (sources are regenerated, never imported)
ARCHIVE_FILES = frozenset({RECORD, META, PLAN, PROGRAM, MANIFEST})

#: the most a JSON file of the cache may hold, by name (anything else: :data:`MAX_JSON_BYTES`)
JSON_BYTES = {MANIFEST: 1 << 20, RECORD: 64 << 20, META: 16 << 20, PLAN: 1 << 20, PROGRAM: 64 << 20}
MAX_JSON_BYTES = 16 << 20
#: nesting depth of any JSON file the cache reads (the deepest real one, program.json, is ~40)
MAX_JSON_DEPTH = 128
KINDS = ("forward", "backward", "inference", "dynamo")


class SchemaError(ValueError):
    """A cache file has the wrong shape."""


def is_bytecode_name(name: str) -> bool:
    return bool(_BYTECODE.match(name))


def is_entry_file(name: str) -> bool:
    """A file name an entry may hold (the manifest included)."""
    return name in ENTRY_FILES or name == MANIFEST or is_bytecode_name(name)


def check_depth(obj: Any, max_depth: int = MAX_JSON_DEPTH) -> None:
    """:class:`SchemaError` if parsed JSON nests arrays/objects deeper than ``max_depth``, checked
    without recursion (the recursive walks after it, hashing and ``explain``, stay safe)."""
    stack = [(obj, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            if d > max_depth:
                raise SchemaError(f"JSON nested deeper than {max_depth} levels")
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))


def loads(data: bytes | str, what: str = "JSON", max_bytes: int = MAX_JSON_BYTES,
          max_depth: int | None = MAX_JSON_DEPTH) -> Any:
    """Parse JSON of bounded size and depth; every failure (bad UTF-8, syntax, depth, even
    ``RecursionError``/``MemoryError``) is a :class:`SchemaError`: the caller treats it as corruption.

    The parser itself stops deep nesting with ``RecursionError`` (it counts its recursion against
    the interpreter's limit); what parses is then held to ``max_depth`` (None: the caller's decoder
    bounds it, as ``ir.serial`` does for ``program.json``)."""
    if len(data) > max_bytes:
        raise SchemaError(f"{what} is {len(data)} bytes (limit {max_bytes})")
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
        obj = json.loads(text)
    except (ValueError, RecursionError, MemoryError) as e:
        raise SchemaError(f"{what} is not valid JSON: {type(e).__name__}: {str(e)[:200]}") from None
    if max_depth is not None:
        check_depth(obj, max_depth)
    return obj


def read_json(path: Any, name: str | None = None) -> Any:
    """A JSON file of the cache, bounded by :data:`JSON_BYTES` for its name; never follows a
    symlink. ``OSError`` (missing file, a link) passes through; anything else is a
    :class:`SchemaError`."""
    name = name or os.path.basename(str(path))
    limit = JSON_BYTES.get(name, MAX_JSON_BYTES)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    return loads(data, name, limit, None if name == PROGRAM else MAX_JSON_DEPTH)


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise SchemaError(what)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def manifest(obj: Any) -> dict:
    """The manifest, or :class:`SchemaError` naming the first problem."""
    _need(isinstance(obj, dict), "manifest is not an object")
    _need(_is_int(obj.get("schema")), "manifest.schema is not an integer")
    _need(isinstance(obj.get("key"), str) and bool(HEX64.match(obj["key"])),
          "manifest.key is not a 64-hex key")
    _need(_is_num(obj.get("created")), "manifest.created is not a number")
    _need(obj.get("package_version") is None or isinstance(obj["package_version"], str),
          "manifest.package_version is not a string")
    files = obj.get("files")
    _need(isinstance(files, dict) and bool(files), "manifest.files is not a non-empty object")
    for name, info in files.items():
        _need(isinstance(name, str) and is_entry_file(name) and name != MANIFEST,
              f"manifest lists a file with an unexpected name: {name!r}")
        _need(isinstance(info, dict) and isinstance(info.get("sha256"), str)
              and bool(HEX64.match(info["sha256"])), f"manifest.files[{name!r}].sha256 is not a hash")
        _need(_is_int(info.get("size")) and info["size"] >= 0,
              f"manifest.files[{name!r}].size is not a size")
    _need(_is_int(obj.get("bytes")) and obj["bytes"] >= 0, "manifest.bytes is not a size")
    _need(obj.get("imported") is None or isinstance(obj["imported"], dict),
          "manifest.imported is not an object")
    return obj


def record(obj: Any) -> dict:
    """A key record (what ``key.make_record`` or ``dynamo_key`` wrote)."""
    _need(isinstance(obj, dict), "record is not an object")
    _need(_is_int(obj.get("schema")), "record.schema is not an integer")
    pkg = obj.get("package")
    _need(isinstance(pkg, dict) and isinstance(pkg.get("version"), str)
          and isinstance(pkg.get("source_sha256"), str), "record.package is not {version, source_sha256}")
    for f in ("torch", "python"):
        _need(isinstance(obj.get(f), str), f"record.{f} is not a string")
    _need(obj.get("target") is None or isinstance(obj["target"], str), "record.target is not a string")
    _need(obj.get("kind") in KINDS, f"record.kind is not one of {KINDS}")
    _need(isinstance(obj.get("config"), dict), "record.config is not an object")
    inputs = obj.get("inputs")
    _need(isinstance(inputs, list) and all(isinstance(i, dict) for i in inputs),
          "record.inputs is not a list of objects")
    for i, inp in enumerate(inputs):
        for f in ("shape", "stride"):
            if f in inp:
                _need(isinstance(inp[f], list) and all(_is_int(s) or isinstance(s, str) for s in inp[f]),
                      f"record.inputs[{i}].{f} is not a list of sizes")
        if "dtype" in inp:
            _need(isinstance(inp["dtype"], str), f"record.inputs[{i}].dtype is not a string")
    graph = obj.get("graph")
    _need(isinstance(graph, list) and all(isinstance(g, str) for g in graph),
          "record.graph is not a list of strings")
    _need(obj.get("state") is None or isinstance(obj["state"], dict), "record.state is not an object")
    return obj


_META_TYPES: dict[str, tuple[type, ...]] = {
    "graph_name": (str,), "kind": (str,), "summary": (str,), "python": (str,),
    "fallbacks": (list,), "collectives": (list,), "cost": (dict, type(None)),
    "input_shapes": (list,), "input_dtypes": (list,),
}


def meta(obj: Any) -> dict:
    """Entry metadata: an object whose known fields have their types (unknown fields are kept)."""
    _need(isinstance(obj, dict), "meta is not an object")
    for f, types in _META_TYPES.items():
        if f in obj:
            _need(isinstance(obj[f], types), f"meta.{f} has the wrong type")
    for f in ("compile_seconds", "n_kernels", "n_aten_ops"):
        if obj.get(f) is not None:
            _need(_is_num(obj[f]) and obj[f] >= 0, f"meta.{f} is not a non-negative number")
    for s in obj.get("input_shapes", []):
        _need(isinstance(s, list) and all(_is_int(d) or isinstance(d, str) for d in s),
              "meta.input_shapes is not a list of shapes")
    _need(all(isinstance(d, str) for d in obj.get("input_dtypes", [])), "meta.input_dtypes is not strings")
    _need(all(isinstance(f, dict) for f in obj.get("fallbacks", [])), "meta.fallbacks is not objects")
    return obj


def _int_list(v: Any, what: str) -> list[int]:
    _need(isinstance(v, list) and all(_is_int(x) and x >= 0 for x in v), f"{what} is not a list of indices")
    return v


def plan(obj: Any) -> dict:
    """A Dynamo-level entry: which ATen-level entries serve the graph and how to call them."""
    _need(isinstance(obj, dict), "plan is not an object")
    _need(obj.get("mode") in ("inference", "training"), "plan.mode is not inference/training")
    for f in ("forward", "backward"):
        v = obj.get(f)
        _need(v is None or (isinstance(v, str) and bool(HEX64.match(v))), f"plan.{f} is not a key")
    _need(obj["forward"] is not None, "plan.forward is missing")
    _need((obj["backward"] is None) == (obj["mode"] == "inference"),
          "plan.backward must be set exactly for training")
    for f in ("n_inputs", "n_outputs", "n_saved"):
        _need(_is_int(obj.get(f)) and obj[f] >= 0, f"plan.{f} is not a count")
    _int_list(obj.get("grad_inputs"), "plan.grad_inputs")
    _int_list(obj.get("nondiff_outputs"), "plan.nondiff_outputs")
    _int_list(obj.get("tangent_outputs"), "plan.tangent_outputs")
    strides = obj.get("tangent_strides")
    _need(isinstance(strides, list) and all(isinstance(s, list) and all(_is_int(d) for d in s)
                                            for s in strides), "plan.tangent_strides is not strides")
    _need(len(strides) == len(obj["tangent_outputs"]), "plan.tangent_strides does not match tangents")
    _need(all(i < obj["n_inputs"] for i in obj["grad_inputs"]), "plan.grad_inputs out of range")
    _need(all(i < obj["n_outputs"] for i in obj["nondiff_outputs"] + obj["tangent_outputs"]),
          "plan output index out of range")
    return obj


__all__ = ["SchemaError", "manifest", "record", "meta", "plan", "is_entry_file", "is_bytecode_name",
           "loads", "read_json", "check_depth", "PROGRAM", "ARCHIVE_FILES",
           "HEX64", "HEX2", "VERSION_DIR", "ENTRY_FILES", "SOURCE_FILES"]
