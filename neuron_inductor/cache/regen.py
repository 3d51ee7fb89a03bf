"""Regenerate an imported entry's Python modules from its data, with this machine's code generator.

``cache import`` never installs Python source from an archive. An entry carries its host program and
tile IR as data (``program.json``, written by ``ir/serial.py``); here that data is decoded under
strict bounds, checked against the entry's key record (the program's inputs, outputs and host ops
must be the graph's), run through the IR verifier, and printed by ``codegen`` exactly as a local
compile would; the generated kernels then pass the same static checks a local compile applies.
Whatever the archive claimed its sources were is only compared with the result (a mismatch refuses
the entry): what gets installed, and later run, is what this machine's compiler writes.
"""
from __future__ import annotations

import hashlib
import keyword
import re
from typing import Any

from . import validate
from .validate import PROGRAM

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
#: names the wrapper and kernel modules bind themselves; a program value may not rebind them
RESERVED = frozenset({"torch", "host", "kernels", "call", "args", "nki", "nl", "nisa", "min", "max",
                      "range", "float", "complex", "PLATFORM_TARGET", "__file__"})
_OP_TARGET = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){1,2}$")
MAX_TEXT = 4096


class RegenError(ValueError):
    """The entry's data does not describe a program this compiler would write for its key."""


def regenerate(program_json: bytes, record: dict, meta: dict) -> dict[str, str]:
    """``{"kernels.py": ..., "wrapper.py": ...}`` regenerated from ``program_json``; :class:`RegenError`
    names the first problem."""
    from ..codegen import check_kernel_source, generate_kernels_module, generate_wrapper_module
    from ..codegen.conform import check_conformance
    from ..ir import serial
    from ..ir.verify import verify_program
    from ..target import get_target

    try:
        data = validate.loads(program_json, PROGRAM, validate.JSON_BYTES[PROGRAM], None)
        program = serial.decode(data)
    except (ValueError, RecursionError, MemoryError) as e:
        raise RegenError(f"{PROGRAM}: {str(e)[:300]}") from None
    graph_name = meta.get("graph_name")
    if not isinstance(graph_name, str) or graph_name != program.name or not _IDENT.match(graph_name):
        raise RegenError("meta.graph_name is not the program's name")
    check_names(program)
    check_signature(program, record)
    try:
        target = get_target(record.get("target"))
        verify_program(program, target)
        kernels = generate_kernels_module(program.kernels, graph_name=graph_name, target=target.name)
        wrapper = generate_wrapper_module(program)
        check_kernel_source(kernels)
        check_conformance(kernels)
    except RegenError:
        raise
    except Exception as e:  # noqa: BLE001 - the verifier, codegen and checks refuse in their own words
        raise RegenError(f"the program does not regenerate: {type(e).__name__}: {str(e)[:300]}") from None
    return {"kernels.py": kernels, "wrapper.py": wrapper}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------------------------- names, text

def _name(v: Any, what: str) -> None:
    if not (isinstance(v, str) and _IDENT.match(v)) or keyword.iskeyword(v) or v in RESERVED \
            or v.startswith("__"):
        raise RegenError(f"{what} {str(v)[:60]!r} is not a plain identifier the generator may bind")


def _text(v: Any, what: str) -> None:
    """Free text printed into a comment or docstring: one printable line, nothing that could end it."""
    if not isinstance(v, str) or len(v) > MAX_TEXT or not v.isprintable() or '"""' in v or "\\" in v:
        raise RegenError(f"{what} is not one printable line of text")


def check_names(program: Any) -> None:
    """Every name the generated modules bind or print is an identifier; free text is one line."""
    from ..ir.nodes import Alloc, Dma, HBMAccess, Instr, Loop, TileRegion, walk
    from ..ir.program import Collective, Empty, Fallback, KernelCall, View

    for n in program.inputs:
        _name(n, "input")
    for n in program.constants:
        _name(n, "constant")
    for step in program.steps:
        for r in getattr(step, "results", []):
            _name(r, "result")
        if isinstance(step, (View, Empty)):
            _name(step.name, "value")
        if isinstance(step, View):
            _name(step.base, "view base")
        if isinstance(step, KernelCall):
            for a in step.args:
                _name(a, "kernel argument")
            k = step.kernel
            _name(k.name, "kernel")
            for t in list(k.params) + list(k.outputs):
                _name(t.name, "kernel parameter")
                if t.host_name is not None:
                    _name(t.host_name, "host value")
            for p in k.provenance:
                _text(p, "kernel provenance")
            _text(k.plan, "kernel plan")
            for s, _ in walk(k.body):
                if isinstance(s, Loop):
                    _name(s.var.name, "loop variable")
                elif isinstance(s, Alloc):
                    _name(s.tile.name, "tile")
                elif isinstance(s, (Dma, Instr)):
                    regions = [s.dst, s.src] if isinstance(s, Dma) else [s.dst, *s.srcs.values()]
                    for r in regions:
                        if isinstance(r, TileRegion):
                            _name(r.tile.name, "tile")
                        elif isinstance(r, HBMAccess):
                            _name(r.tensor.name, "HBM tensor")
        if isinstance(step, (Fallback, Collective)):
            if not (isinstance(step.target, str) and _OP_TARGET.match(step.target)):
                raise RegenError(f"host op {str(step.target)[:60]!r} is not an op name")
            _refs(step.args, step.kwargs)
        if isinstance(step, Fallback):
            _text(step.reason, "fallback reason")
            _text(step.shapes, "fallback shapes")
    _refs(program.outputs)


def _refs(*values: Any) -> None:
    from ..ir.program import Ref

    for v in values:
        if isinstance(v, Ref):
            _name(v.name, "host value")
        elif isinstance(v, (list, tuple)):
            _refs(*v)
        elif isinstance(v, dict):
            for k in v:
                if not (isinstance(k, str) and _IDENT.match(k) and not keyword.iskeyword(k)):
                    raise RegenError(f"keyword {str(k)[:60]!r} is not an identifier")
            _refs(*v.values())


# ------------------------------------------------------------------------------------ the signature

def _graph(record: dict) -> list[dict]:
    out = []
    for line in record.get("graph", []):
        try:
            node = validate.loads(line, "record.graph line", 1 << 20, 64)
        except ValueError as e:
            raise RegenError(str(e)) from None
        if not isinstance(node, dict):
            raise RegenError("record.graph holds a line that is not an object")
        out.append(node)
    return out


def _n_outputs(graph: list[dict]) -> int:
    outs = [n for n in graph if n.get("op") == "output"]
    try:
        (node,) = outs
        (first,) = node["args"]["tup"]
        if isinstance(first, dict) and len(first) == 1 and next(iter(first)) in ("tup", "seq"):
            return len(next(iter(first.values())))
        return 1
    except (ValueError, KeyError, TypeError):
        raise RegenError("the key record's graph has no readable output node") from None


def check_signature(program: Any, record: dict) -> None:
    """The program takes the graph's inputs (count, shapes, strides, dtypes), returns as many values
    as the graph's output node, and its host ops are ops the graph itself calls: an entry cannot
    serve another graph's computation under this key."""
    inputs = record.get("inputs", [])
    if len(program.inputs) != len(inputs):
        raise RegenError(f"the program takes {len(program.inputs)} inputs, the graph {len(inputs)}")
    metas = program.input_meta or [None] * len(program.inputs)
    if len(metas) != len(inputs):
        raise RegenError("the program's input metadata does not match its inputs")
    for i, (m, rec) in enumerate(zip(metas, inputs)):
        if "shape" not in rec:
            continue
        if m is None or list(m.size) != rec["shape"] or list(m.stride) != rec.get("stride", list(m.stride)) \
                or f"torch.{m.dtype}" != rec.get("dtype"):
            raise RegenError(f"input {i}: the program's layout differs from the graph's")
    graph = _graph(record)
    n_out = _n_outputs(graph)
    if len(program.outputs) != n_out:
        raise RegenError(f"the program returns {len(program.outputs)} values, the graph {n_out}")
    called = {n.get("target") for n in graph if n.get("op") == "call_function"}
    for op in [f.target for f in program.fallbacks] + [c.target for c in program.collectives]:
        if op not in called:
            raise RegenError(f"host op {op!r} is not called by the graph")


__all__ = ["regenerate", "RegenError", "check_signature", "check_names", "sha256"]
