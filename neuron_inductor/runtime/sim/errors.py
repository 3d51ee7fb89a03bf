"""Refusals of the simulator.

Every rule the simulator enforces (partition limit, PSUM/SBUF capacity, engine/memory legality, ...)
raises :class:`SimulatorError`.  The message is meant to be read by someone debugging *generated*
code, so it names the rule, the tile(s) involved (by the kernel's own variable name when one can be
found), the kernel and the kernel source line that issued the instruction.
"""
from __future__ import annotations

import linecache
import re
import sys
from typing import Any

from .active import current


class SimulatorError(Exception):
    """A kernel did something the hardware (or NKI) would refuse.

    ``rule`` is a short stable identifier tests and tools can match on (``"psum-capacity"``,
    ``"engine-memory"``, ...); ``kernel`` and ``lineno`` locate the offending kernel line.
    """

    def __init__(self, rule: str, message: str, kernel: str | None = None,
                 lineno: int | None = None, tiles: tuple[str, ...] = ()) -> None:
        self.rule = rule
        self.kernel = kernel
        self.lineno = lineno
        self.tiles = tiles
        super().__init__(message)


def _kernel_frame(code: Any):
    """The innermost live frame executing the jitted function's code (None after it returned)."""
    f = sys._getframe(1)
    while f is not None:
        if f.f_code is code:
            return f
        f = f.f_back
    return None


def _local_name(frame: Any, obj: Any) -> str | None:
    """The kernel's variable name for a tile (so messages say ``x_t``, not ``sbuf3``)."""
    if frame is None:
        return None
    alloc = getattr(obj, "alloc", None)
    for name, value in frame.f_locals.items():
        if value is obj or (alloc is not None and getattr(value, "alloc", None) is alloc):
            return name
    return None


_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*)\s*=[^=]")


def _assigned_name(frame: Any) -> str | None:
    """For a refused allocation: the variable the kernel line was about to bind."""
    if frame is None:
        return None
    m = _ASSIGN.match(linecache.getline(frame.f_code.co_filename, frame.f_lineno))
    return m.group(1) if m else None


def describe(obj: Any, frame: Any = None, allocating: bool = False) -> str:
    """Human description of a tile / HBM view / access pattern for error messages."""
    alloc = getattr(obj, "alloc", None)
    if alloc is None:
        return repr(obj)
    var = _local_name(frame, obj) or (_assigned_name(frame) if allocating else None)
    label = var if var else alloc.name
    if var and alloc.name and alloc.name != var and not alloc.name.startswith(alloc.buffer):
        label = f"{var} ({alloc.name})"
    return f"{label}: {alloc.buffer} {alloc.dtype_name}{list(alloc.shape)} {obj.region_text()}"


def refuse(rule: str, detail: str, *objs: Any, allocating: bool = False) -> SimulatorError:
    """Build (not raise) the error for ``rule``; callers ``raise refuse(...)``.

    ``allocating`` marks a refused allocation, whose tile is not bound to a variable yet."""
    ctx = current()
    kernel = ctx.name if ctx is not None else None
    frame = _kernel_frame(ctx.code) if ctx is not None else None
    lineno = frame.f_lineno if frame is not None else None
    tiles = tuple(describe(o, frame, allocating) for o in objs if o is not None)
    where = ""
    if kernel is not None:
        where = f" in kernel '{kernel}'"
        if lineno is not None:
            src = linecache.getline(frame.f_code.co_filename, lineno).strip()
            where += f", line {lineno}" + (f": {src}" if src else "")
    text = f"[{rule}] {detail}{where}"
    if tiles:
        text += "\n  tiles: " + "; ".join(tiles)
    return SimulatorError(rule, text, kernel, lineno, tiles)
