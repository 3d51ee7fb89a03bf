"""The host program and its tile IR as JSON data, and back, without executing anything.

Why: a cache entry carries its ``Program`` as data (``program.json``) so that another machine can
*regenerate* the entry's Python modules with its own code generator instead of importing Python
source from an archive (``cache/regen.py``). Decoding is therefore a parser for untrusted input:

* only the node types of :data:`NODE_TYPES` are built, each from exactly its dataclass fields
  (written generically over ``dataclasses.fields``, so a field added to a node is carried without
  touching this file; a field the data does not know is an error, a missing field with a default
  takes it);
* only the sympy functions of :data:`SYMPY_FUNCS`, the enums of :data:`ENUMS` and the torch dtypes,
  layouts and memory formats by their names are recognised; no name is ever looked up in a module
  namespace, no ``eval``/``pickle``/``sympify`` of text;
* sizes are bounded (nodes, depth, string and list lengths, integer magnitude, tensor elements):
  :class:`SerialError` names the first violation. Node constructors run their own checks
  (``__post_init__``: opcodes, engines, dtypes); what they raise is reported as a
  :class:`SerialError` too.

Object sharing is kept (a ``Tile`` referenced by many regions decodes to one object): the first
occurrence of an object carries ``"$id"``, later ones ``{"$ref": id}``; a reference may only name an
object already decoded, so the data cannot make a cycle.
"""
from __future__ import annotations

import dataclasses
import math
from enum import Enum
from typing import Any

import sympy

from ..spec.ops import ActFunc, AluOp
from . import nodes, program

#: every IR type data may build, by name (UserKernelCall is absent: a hand-written kernel's source
#: is not IR, so a program calling one cannot be regenerated from data)
NODE_TYPES: dict[str, type] = {c.__name__: c for c in (
    program.Program, program.TensorMeta, program.KernelCall, program.View, program.Empty,
    program.RngKey, program.Fallback, program.Collective, program.Ref,
    nodes.Kernel, nodes.HBMTensor, nodes.Tile, nodes.TileRegion, nodes.HBMAccess, nodes.Loop,
    nodes.Alloc, nodes.Dma, nodes.Instr)}

#: sympy heads an index expression may use (what ``ir.exprs`` prints), plus the relations
SYMPY_FUNCS: dict[str, Any] = {
    "Add": sympy.Add, "Mul": sympy.Mul, "Pow": sympy.Pow, "Min": sympy.Min, "Max": sympy.Max,
    "floor": sympy.floor, "ceiling": sympy.ceiling, "Mod": sympy.Mod,
    "StrictGreaterThan": sympy.StrictGreaterThan, "GreaterThan": sympy.GreaterThan,
    "StrictLessThan": sympy.StrictLessThan, "LessThan": sympy.LessThan,
    "Equality": sympy.Eq, "Unequality": sympy.Ne,
}
#: assumptions a symbol may carry (loop variables are integer and non-negative)
SYMBOL_ASSUMPTIONS = frozenset({"integer", "nonnegative", "positive", "real"})
ENUMS: dict[str, type[Enum]] = {"AluOp": AluOp, "ActFunc": ActFunc}
TORCH_KINDS = ("dtype", "layout", "memory_format")
MAX_SYMPY_ARGS = 64


class SerialError(ValueError):
    """The data is not a program this compiler could have written."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """Bounds on what one decoded program may hold."""

    max_nodes: int = 2_000_000
    max_depth: int = 96
    max_str: int = 4096
    max_seq: int = 1_000_000
    max_int_bits: int = 64
    max_tensor_elements: int = 1 << 20


# ----------------------------------------------------------------------------------------- encode

def encode(obj: Any) -> Any:
    """``obj`` (a :class:`~neuron_inductor.ir.program.Program` or any IR value) as JSON-able data."""
    return _Encoder().enc(obj)


class _Encoder:
    def __init__(self) -> None:
        self.ids: dict[int, int] = {}
        self.keep: list[Any] = []  # ids stay unique while encoding

    def enc(self, v: Any) -> Any:
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, Enum):
            name = type(v).__name__
            if ENUMS.get(name) is not type(v):
                raise SerialError(f"enum {name} is not serialisable")
            return {"$enum": name, "v": v.value}
        if isinstance(v, int):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else {"$float": repr(v)}
        if isinstance(v, complex):
            return {"$complex": [self.enc(v.real), self.enc(v.imag)]}
        if isinstance(v, sympy.Basic):
            return self.sym(v)
        if isinstance(v, tuple):
            return {"$tuple": [self.enc(x) for x in v]}
        if isinstance(v, list):
            return [self.enc(x) for x in v]
        if isinstance(v, dict):
            if not all(isinstance(k, str) for k in v):
                raise SerialError("dict keys must be strings")
            return {"$dict": [[k, self.enc(x)] for k, x in v.items()]}
        name = type(v).__name__
        if NODE_TYPES.get(name) is type(v):
            if id(v) in self.ids:
                return {"$ref": self.ids[id(v)]}
            out: dict[str, Any] = {"$node": name}
            for f in dataclasses.fields(v):
                out[f.name] = self.enc(getattr(v, f.name))
            self.ids[id(v)] = len(self.ids)
            self.keep.append(v)
            out["$id"] = self.ids[id(v)]
            return out
        return self.torch_value(v)

    def sym(self, e: sympy.Basic) -> Any:
        if e is sympy.true or e is sympy.false:
            return {"$bool": bool(e)}
        if e.is_Integer:
            return {"$int": int(e)}
        if e.is_Rational:
            return {"$rat": [int(e.p), int(e.q)]}
        if e.is_Symbol:
            true = sorted(k for k, val in e.assumptions0.items() if val and k in SYMBOL_ASSUMPTIONS)
            return {"$sym": e.name, "a": true}
        head = type(e).__name__
        if SYMPY_FUNCS.get(head) is None:
            raise SerialError(f"sympy {head} is not serialisable")
        return {"$fn": head, "args": [self.sym(a) for a in e.args]}

    def torch_value(self, v: Any) -> Any:
        import torch

        if isinstance(v, torch.dtype):
            return {"$torch": "dtype", "v": str(v).replace("torch.", "")}
        if isinstance(v, torch.layout):
            return {"$torch": "layout", "v": str(v).replace("torch.", "")}
        if isinstance(v, torch.memory_format):
            return {"$torch": "memory_format", "v": str(v).replace("torch.", "")}
        if isinstance(v, torch.device):
            return {"$device": str(v)}
        if isinstance(v, torch.Tensor):
            t = v.detach().cpu()
            data = t.float() if t.dtype in (torch.bfloat16, torch.float16) else t
            flat = data.reshape(-1).tolist()
            return {"$tensor": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                    "data": [self.enc(x) for x in flat]}
        raise SerialError(f"{type(v).__name__} values are not serialisable")


# ----------------------------------------------------------------------------------------- decode

def decode(data: Any, limits: Limits = Limits(), *, want: type | None = program.Program) -> Any:
    """The IR value ``data`` describes; :class:`SerialError` on anything :func:`encode` cannot write."""
    d = _Decoder(limits)
    out = d.dec(data, 0)
    if want is not None and not isinstance(out, want):
        raise SerialError(f"expected a {want.__name__}, got {type(out).__name__}")
    return out


class _Decoder:
    def __init__(self, limits: Limits) -> None:
        self.lim = limits
        self.objs: list[Any] = []
        self.count = 0

    def tick(self, depth: int) -> None:
        self.count += 1
        if self.count > self.lim.max_nodes:
            raise SerialError(f"more than {self.lim.max_nodes} values")
        if depth > self.lim.max_depth:
            raise SerialError(f"nested deeper than {self.lim.max_depth}")

    def seq(self, v: Any, what: str) -> list:
        if not isinstance(v, list):
            raise SerialError(f"{what} is not a list")
        if len(v) > self.lim.max_seq:
            raise SerialError(f"{what} has more than {self.lim.max_seq} items")
        return v

    def int_(self, v: Any) -> int:
        if not isinstance(v, int) or isinstance(v, bool) or v.bit_length() > self.lim.max_int_bits:
            raise SerialError(f"integer out of range or not an integer: {str(v)[:40]}")
        return v

    def str_(self, v: Any, what: str = "string") -> str:
        if not isinstance(v, str) or len(v) > self.lim.max_str:
            raise SerialError(f"{what} is not a string of at most {self.lim.max_str} characters")
        return v

    def dec(self, v: Any, depth: int) -> Any:
        self.tick(depth)
        if v is None or isinstance(v, (bool, str)):
            return self.str_(v) if isinstance(v, str) else v
        if isinstance(v, int):
            return self.int_(v)
        if isinstance(v, float):
            if not math.isfinite(v):
                raise SerialError("non-finite float outside {$float}")
            return v
        if isinstance(v, list):
            return [self.dec(x, depth + 1) for x in self.seq(v, "list")]
        if not isinstance(v, dict) or len(v) == 0:
            raise SerialError(f"unexpected {type(v).__name__} value")
        tag = "$node" if "$node" in v else next(iter(v))
        handler = _TAGS.get(tag)
        if handler is None:
            raise SerialError(f"unknown tag {str(tag)[:40]!r}")
        return handler(self, v, depth)

    def keys(self, v: dict, *names: str) -> None:
        if set(v) != set(names):
            raise SerialError(f"{next(iter(v))} with fields {sorted(v)[:8]}, expected {sorted(names)}")

    def node(self, v: dict, depth: int) -> Any:
        name = self.str_(v["$node"])
        cls = NODE_TYPES.get(name)
        if cls is None:
            raise SerialError(f"node type {name[:40]!r} is not allowed")
        oid = v.get("$id")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = set(v) - set(fields) - {"$node", "$id"}
        if unknown:
            raise SerialError(f"{name}: unknown fields {sorted(unknown)[:5]}")
        kwargs = {}
        for fname, f in fields.items():
            if fname in v:
                kwargs[fname] = self.dec(v[fname], depth + 1)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise SerialError(f"{name}: field {fname} is missing")
        try:
            obj = cls(**kwargs)
        except SerialError:
            raise
        except Exception as e:  # noqa: BLE001 - a node's own checks (asserts, spec lookups)
            raise SerialError(f"{name}: {type(e).__name__}: {str(e)[:200]}") from None
        if oid != len(self.objs) or isinstance(oid, bool):  # ids are given in post-order
            raise SerialError(f"{name}: object id {str(oid)[:20]} out of order")
        self.objs.append(obj)
        return obj

    def ref(self, v: dict, depth: int) -> Any:
        self.keys(v, "$ref")
        i = self.int_(v["$ref"])
        if not 0 <= i < len(self.objs):
            raise SerialError(f"reference {i} to an object not decoded yet")
        return self.objs[i]

    def tuple_(self, v: dict, depth: int) -> tuple:
        self.keys(v, "$tuple")
        return tuple(self.dec(x, depth + 1) for x in self.seq(v["$tuple"], "tuple"))

    def dict_(self, v: dict, depth: int) -> dict:
        self.keys(v, "$dict")
        out = {}
        for item in self.seq(v["$dict"], "dict"):
            if not isinstance(item, list) or len(item) != 2:
                raise SerialError("dict item is not a [key, value] pair")
            k = self.str_(item[0], "dict key")
            if k in out:
                raise SerialError(f"dict key {k[:40]!r} twice")
            out[k] = self.dec(item[1], depth + 1)
        return out

    def float_(self, v: dict, depth: int) -> float:
        self.keys(v, "$float")
        if v["$float"] not in ("nan", "inf", "-inf"):
            raise SerialError("$float holds only nan, inf, -inf")
        return float(v["$float"])

    def complex_(self, v: dict, depth: int) -> complex:
        self.keys(v, "$complex")
        parts = self.seq(v["$complex"], "complex")
        if len(parts) != 2:
            raise SerialError("complex is not [re, im]")
        re_, im = (self.dec(p, depth + 1) for p in parts)
        if not all(isinstance(p, float) for p in (re_, im)):
            raise SerialError("complex parts are not floats")
        return complex(re_, im)

    def enum(self, v: dict, depth: int) -> Enum:
        self.keys(v, "$enum", "v")
        cls = ENUMS.get(self.str_(v["$enum"]))
        if cls is None:
            raise SerialError(f"enum {str(v['$enum'])[:40]!r} is not allowed")
        try:
            return cls(self.str_(v["v"]))
        except ValueError:
            raise SerialError(f"{cls.__name__} has no member {str(v['v'])[:40]!r}") from None


# sympy: built from allowlisted heads only; evaluation re-canonicalises what encode wrote

def _sym_int(self: _Decoder, v: dict, depth: int) -> sympy.Integer:
    self.keys(v, "$int")
    return sympy.Integer(self.int_(v["$int"]))


def _sym_bool(self: _Decoder, v: dict, depth: int) -> Any:
    self.keys(v, "$bool")
    if not isinstance(v["$bool"], bool):
        raise SerialError("$bool is not a boolean")
    return sympy.true if v["$bool"] else sympy.false


def _sym_rat(self: _Decoder, v: dict, depth: int) -> sympy.Rational:
    self.keys(v, "$rat")
    pq = self.seq(v["$rat"], "rational")
    if len(pq) != 2 or self.int_(pq[1]) == 0:
        raise SerialError("rational is not [p, q] with q != 0")
    return sympy.Rational(self.int_(pq[0]), pq[1])


def _sym_symbol(self: _Decoder, v: dict, depth: int) -> sympy.Symbol:
    self.keys(v, "$sym", "a")
    name = self.str_(v["$sym"], "symbol name")
    if not name.isidentifier():
        raise SerialError(f"symbol name {name[:40]!r} is not an identifier")
    flags = self.seq(v["a"], "assumptions")
    if not all(isinstance(a, str) and a in SYMBOL_ASSUMPTIONS for a in flags):
        raise SerialError(f"symbol {name}: assumptions must be among {sorted(SYMBOL_ASSUMPTIONS)}")
    return sympy.Symbol(name, **{a: True for a in flags})


def _sym_fn(self: _Decoder, v: dict, depth: int) -> sympy.Basic:
    self.keys(v, "$fn", "args")
    fn = SYMPY_FUNCS.get(self.str_(v["$fn"]))
    if fn is None:
        raise SerialError(f"sympy function {str(v['$fn'])[:40]!r} is not allowed")
    raw = self.seq(v["args"], "args")
    if len(raw) > MAX_SYMPY_ARGS:  # sympy canonicalises arguments: keep that cheap
        raise SerialError(f"{v['$fn']} with more than {MAX_SYMPY_ARGS} arguments")
    args = [self.dec(a, depth + 1) for a in raw]
    if not args or not all(isinstance(a, sympy.Basic) for a in args):
        raise SerialError(f"{v['$fn']}: arguments are not expressions")
    if fn is sympy.Pow and not (args[1].is_Integer and 0 <= int(args[1]) <= 64):
        raise SerialError("Pow exponent must be a small non-negative integer")
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - wrong arity and the like
        raise SerialError(f"{v['$fn']}: {type(e).__name__}") from None


def _torch(self: _Decoder, v: dict, depth: int) -> Any:
    import torch

    self.keys(v, "$torch", "v")
    kind, name = v["$torch"], self.str_(v["v"])
    if kind not in TORCH_KINDS or not name.isidentifier():
        raise SerialError(f"torch value {str(kind)[:20]}/{name[:40]!r} is not allowed")
    val = getattr(torch, name, None)  # only a value of the expected torch type is accepted
    want = {"dtype": torch.dtype, "layout": torch.layout, "memory_format": torch.memory_format}[kind]
    if not isinstance(val, want):
        raise SerialError(f"torch.{name} is not a {kind}")
    return val


def _device(self: _Decoder, v: dict, depth: int) -> Any:
    import torch

    self.keys(v, "$device")
    name = self.str_(v["$device"])
    if name not in ("cpu", "meta") and not name.split(":")[0] in ("cuda", "xla", "neuron", "privateuseone"):
        raise SerialError(f"device {name[:40]!r} is not allowed")
    try:
        return torch.device(name)
    except (RuntimeError, ValueError):
        raise SerialError(f"device {name[:40]!r} is not a device") from None


def _tensor(self: _Decoder, v: dict, depth: int) -> Any:
    import torch

    self.keys(v, "$tensor", "shape", "data")
    dtype = _torch(self, {"$torch": "dtype", "v": v["$tensor"]}, depth)
    shape = [self.int_(s) for s in self.seq(v["shape"], "tensor shape")]
    if len(shape) > 8 or any(s < 0 for s in shape):
        raise SerialError("tensor shape is not a small list of sizes")
    numel = math.prod(shape)
    data = self.seq(v["data"], "tensor data")
    if numel > self.lim.max_tensor_elements or len(data) != numel:
        raise SerialError(f"tensor of {numel} elements with {len(data)} values "
                          f"(limit {self.lim.max_tensor_elements})")
    vals = [self.dec(x, depth + 1) for x in data]
    if not all(isinstance(x, (bool, int, float, complex)) for x in vals):
        raise SerialError("tensor data holds non-numbers")
    try:
        return torch.tensor(vals, dtype=dtype).reshape(shape)
    except (RuntimeError, TypeError, OverflowError) as e:
        raise SerialError(f"tensor data does not fit {dtype}: {str(e)[:100]}") from None


_TAGS = {"$node": _Decoder.node, "$ref": _Decoder.ref, "$tuple": _Decoder.tuple_, "$dict": _Decoder.dict_,
         "$float": _Decoder.float_, "$complex": _Decoder.complex_, "$enum": _Decoder.enum,
         "$int": _sym_int, "$bool": _sym_bool, "$rat": _sym_rat, "$sym": _sym_symbol, "$fn": _sym_fn,
         "$torch": _torch, "$device": _device, "$tensor": _tensor}

__all__ = ["encode", "decode", "SerialError", "Limits", "NODE_TYPES", "SYMPY_FUNCS"]
