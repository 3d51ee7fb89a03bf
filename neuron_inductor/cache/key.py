"""The cache key: a flat, JSON-able record of everything that changes the generated code.

The record is hashed (sha256 of canonical JSON) to give the key, and it is also stored with each entry
so that ``neuron-inductor cache explain`` can diff a miss against the nearest entry field by field.
It must never contain paths, pids, ranks, timestamps or FX node names: those differ between processes
that compile the same graph and would split the cache.
"""
from __future__ import annotations

import hashlib
import json
import math
import sys
from typing import Any, Sequence

import torch
import torch.fx

from ..user_kernels import digests_in
from .schema import SCHEMA_VERSION, canonical_json, flatten, key_of, package_fingerprint


def _dim(v: Any) -> Any:
    """Concrete sizes as ints; symbolic ones by their expression text (stable across processes)."""
    if isinstance(v, int):
        return v
    if isinstance(v, torch.SymInt):
        node = v.node
        if hasattr(node, "maybe_as_int") and node.maybe_as_int() is not None:
            return int(node.maybe_as_int())
        return f"sym:{v}"
    return str(v)


def tensor_value_hash(t: torch.Tensor) -> str:
    """Constants enter the key by value, so renaming a buffer keeps the key and changing it does not."""
    if t.device.type == "meta" or _is_fake(t):
        return "unhashable:" + _tensor_meta_text(t)
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    # AOTAutograd calls the backend inside its FakeTensorMode; reading real bytes needs it off.
    with unset_fake_temporarily(), torch.no_grad():
        t = t.detach().cpu().contiguous()
        h = hashlib.sha256(_tensor_meta_text(t).encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


def _tensor_meta_text(t: torch.Tensor) -> str:
    return f"{t.dtype}{[_dim(s) for s in t.shape]}{[_dim(s) for s in t.stride()]}"


def _float(v: float) -> str:
    # repr is exact and round-trips; nan/inf spelled explicitly so JSON stays strict.
    return "nan" if math.isnan(v) else repr(v)


def qualified_name(target: Any) -> str:
    if isinstance(target, str):
        return target
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(target)
    mod = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)
    return f"{mod}.{name}" if mod else name


def _canon_arg(a: Any, index: dict[torch.fx.Node, int]) -> Any:
    if isinstance(a, torch.fx.Node):
        return f"%{index[a]}"
    if isinstance(a, bool) or a is None:
        return a
    if isinstance(a, int):
        return a
    if isinstance(a, float):
        return {"f": _float(a)}
    if isinstance(a, str):
        return {"s": a}
    if isinstance(a, (list, tuple)):
        return {"seq" if isinstance(a, list) else "tup": [_canon_arg(x, index) for x in a]}
    if isinstance(a, dict):
        return {"dict": [[str(k), _canon_arg(v, index)] for k, v in sorted(a.items(), key=lambda kv: str(kv[0]))]}
    if isinstance(a, slice):
        return {"slice": [_canon_arg(x, index) for x in (a.start, a.stop, a.step)]}
    if isinstance(a, torch.Tensor):
        return {"tensor": tensor_value_hash(a)}
    if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return {"sym": str(a)}
    if isinstance(a, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return {"t": str(a)}
    if callable(a):
        return {"fn": qualified_name(a)}
    return {"repr": repr(a)}


def _meta_val(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return {"shape": [_dim(s) for s in v.shape], "stride": [_dim(s) for s in v.stride()],
                "dtype": str(v.dtype)}
    if isinstance(v, (list, tuple)):
        return [_meta_val(x) for x in v]
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return {"sym": str(v)}
    if isinstance(v, (int, float, bool)) or v is None:
        return v if not isinstance(v, float) else _float(v)
    return type(v).__name__


def _module_text(gm: torch.fx.GraphModule, target: str) -> dict[str, Any]:
    mod = gm.get_submodule(target)
    params = {n: tensor_value_hash(p) for n, p in sorted(mod.state_dict().items())}
    return {"module": qualified_name(type(mod)), "repr": mod.extra_repr(), "state": params}


def canonical_graph(gm: torch.fx.GraphModule) -> list[str]:
    """One JSON line per node with names replaced by positions.

    Placeholder and node names are what Dynamo and AOTAutograd vary between runs; positions, op
    targets, constant values and meta shapes are what the compiler actually consumes.
    """
    index: dict[torch.fx.Node, int] = {}
    lines: list[str] = []
    for i, node in enumerate(gm.graph.nodes):
        index[node] = i
        entry: dict[str, Any] = {"op": node.op}
        if node.op == "get_attr":
            value = _fetch_attr(gm, node.target)
            if isinstance(value, torch.Tensor):
                entry["value"] = tensor_value_hash(value)
            elif isinstance(value, torch.nn.Module):
                entry["value"] = _module_text(gm, node.target)
            else:
                entry["value"] = _canon_arg(value, index)
        elif node.op == "call_module":
            entry["target"] = _module_text(gm, node.target)
        elif node.op != "placeholder" and node.op != "output":
            entry["target"] = qualified_name(node.target)
        entry["args"] = _canon_arg(tuple(node.args), index)
        entry["kwargs"] = _canon_arg(dict(node.kwargs), index)
        if "val" in node.meta:
            entry["val"] = _meta_val(node.meta["val"])
        elif "tensor_meta" in node.meta:
            tm = node.meta["tensor_meta"]
            if hasattr(tm, "shape"):
                entry["val"] = {"shape": [_dim(s) for s in tm.shape],
                                "stride": [_dim(s) for s in tm.stride], "dtype": str(tm.dtype)}
        lines.append(json.dumps(entry, sort_keys=True, separators=(",", ":")))
    return lines


def _fetch_attr(gm: torch.nn.Module, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def input_record(x: Any) -> dict[str, Any]:
    if isinstance(x, torch.Tensor):
        return {"shape": [_dim(s) for s in x.shape], "stride": [_dim(s) for s in x.stride()],
                "dtype": str(x.dtype), "requires_grad": bool(x.requires_grad)}
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return {"scalar": str(x)}
    if isinstance(x, float):
        return {"scalar": _float(x)}
    if isinstance(x, (int, bool)) or x is None:
        return {"scalar": x}
    return {"scalar": type(x).__name__}


def make_record(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], kind: str, cfg: Any) -> dict:
    """The full key record; :func:`key_of` hashes it."""
    if kind not in ("forward", "backward", "inference"):
        raise ValueError(f"kind must be 'forward', 'backward' or 'inference', not {kind!r}")
    record = {
        "schema": SCHEMA_VERSION,
        "package": package_fingerprint(),
        "torch": torch.__version__,
        "python": "%d.%d.%d" % sys.version_info[:3],
        "target": cfg.target,
        "kind": kind,
        "config": {k: v for k, v in sorted(cfg.code_affecting().items())},
        "inputs": [input_record(x) for x in example_inputs],
        "graph": canonical_graph(gm),
    }
    # hand-written kernels the graph calls: editing one must recompile (absent for other graphs,
    # so their keys do not change)
    digests = digests_in(gm)
    if digests:
        record["user_kernels"] = digests
    return record


__all__ = ["SCHEMA_VERSION", "package_fingerprint", "make_record", "key_of", "canonical_json",
           "canonical_graph", "input_record", "flatten", "tensor_value_hash"]
