"""Kernel construction helpers shared by every lowering: parameters, tiles, loops, instructions.

A ``KernelBuilder`` accumulates IR statements into the current block (``with kb.loop(...)`` opens a
nested one), hands out readable names, and recycles SBUF tiles whose values are dead so a long fused
chain stays within the SBUF budget instead of allocating one tile per op.

Instructions are emitted through one typed method per ``nisa`` instruction of the specification
(``kb.tensor_scalar(dst, data=x, op0=AluOp.add, operand0=1.0)``, ``kb.nc_matmul(...)``), generated
from ``spec.INSTRS``: the keywords a method accepts, its default engine and which keywords are tile
operands come from that one table, so a misspelt keyword fails where the lowering wrote it.
"""
from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Callable, Iterator

import sympy

from ..ir import (Alloc, Dma, HBMAccess, HBMTensor, Instr, Kernel, Loop, NameGen, Operand, Stmt, Tile,
                  TileRegion, loop_var)
from ..spec.instrs import COMPUTE_INSTRS, INSTRS, Engine, InstrSpec, instr_spec
from ..target import Target


class ValueKind(StrEnum):
    """What a ``TVal`` holds: a ``full`` [rows, cols] region, a ``row`` [rows, 1] region (constant
    along the free axis) or a Python ``scalar``."""

    full = "full"
    row = "row"
    scalar = "scalar"


@dataclass(frozen=True, eq=False)
class TVal:
    """A value inside a tile iteration: a ``full`` [rows, cols] region, a ``row`` [rows, 1] region
    (constant along the free axis), or a Python ``scalar``. Frozen: a lowering that learns more
    about a value (a bound) makes a new one with ``dataclasses.replace``."""

    kind: ValueKind
    region: TileRegion | None = None
    scalar: float | int | bool | None = None
    #: an int64 value read from HBM: its high words (``region`` holds the low words); None when the
    #: value is the sign extension of ``region`` (it fits in int32)
    hi: TileRegion | None = None
    #: a proven bound on |value| of an integer value (None: only its dtype's range is known)
    bound: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ValueKind(self.kind))

    @property
    def dtype(self) -> str:
        return self.region.dtype if self.region is not None else "float32"

    @staticmethod
    def const(v) -> "TVal":
        return TVal(ValueKind.scalar, scalar=v)

    @staticmethod
    def full(region: TileRegion, hi: TileRegion | None = None, bound: int | None = None) -> "TVal":
        return TVal(ValueKind.full, region, hi=hi, bound=bound)

    @staticmethod
    def row(region: TileRegion, hi: TileRegion | None = None, bound: int | None = None) -> "TVal":
        return TVal(ValueKind.row, region, hi=hi, bound=bound)


class Emitter:
    """The typed instruction methods (one per compute instruction of ``spec.INSTRS``, generated
    below by ``_emitter``) over one ``add``: the kernel builder appends to its current block, a
    scheduling wrapper may also price what it emits."""

    def add(self, stmt: Stmt) -> None:
        raise NotImplementedError

    def memset(self, dst: TileRegion, value, engine: str = "vector") -> None:
        """Fill ``dst`` with ``value`` spelled as a literal of its dtype (NKI matches literal types
        strictly: a float into float tiles, an int into integer tiles)."""
        self.add(Instr(Engine(engine), "memset", dst, {}, {"value": literal(value, dst.dtype)}))


class KernelBuilder(Emitter):
    def __init__(self, name: str, target: Target) -> None:
        self.name = name
        self.target = target
        self.names = NameGen()
        self.params: dict[str, HBMTensor] = {}
        self.outputs: list[HBMTensor] = []
        self.body: list[Stmt] = []
        self._blocks: list[list[Stmt]] = [self.body]
        self._pools: list[dict[tuple, list[Tile]]] = [{}]
        self.provenance: list[str] = []
        self.plan = ""

    # --- HBM ---------------------------------------------------------------------------------
    def param(self, host_name: str, numel: int, dtype: str, kind: str = "input") -> HBMTensor:
        """The parameter binding host value ``host_name`` (one per value). A parameter the kernel
        writes is declared ``inout`` before anything reads it: tensors are frozen once built."""
        t = self.params.get(host_name)
        if t is None:
            t = HBMTensor(self.names("in"), numel, dtype, kind, host_name)
            self.params[host_name] = t
        elif kind == "inout" and t.kind != "inout":
            raise ValueError(f"{host_name} is declared written after the kernel read it")
        return t

    def output(self, numel: int, dtype: str) -> HBMTensor:
        t = HBMTensor(self.names("out"), numel, dtype, "output")
        self.outputs.append(t)
        return t

    # --- blocks and loops --------------------------------------------------------------------
    def add(self, stmt: Stmt) -> None:
        self._blocks[-1].append(stmt)

    @contextlib.contextmanager
    def loop(self, extent: int, kind: str = "affine", prefix: str = "i") -> Iterator[sympy.Symbol]:
        var = loop_var(self.names(prefix))
        lp = Loop(var, int(extent), kind)
        self.add(lp)
        self._blocks.append(lp.body)
        self._pools.append({})
        try:
            yield var
        finally:
            self._blocks.pop()
            self._pools.pop()

    # --- tiles -------------------------------------------------------------------------------
    def tile(self, shape: tuple[int, ...], dtype: str, memory: str = "sbuf", prefix: str = "t") -> Tile:
        """A tile allocated in the current block, reusing a released one of the same kind."""
        key = (tuple(shape), dtype, memory)
        pool = self._pools[-1].get(key)
        if pool:
            return pool.pop()
        t = Tile(self.names(prefix), tuple(int(s) for s in shape), dtype, memory, len(self._blocks))
        self.add(Alloc(t))
        return t

    def release(self, tile: Tile) -> None:
        """Return a tile to the pool once its value is dead. Only tiles of the current block are
        recycled: reusing an outer block's tile inside an affine loop would make its iterations
        write the same memory."""
        if tile.depth == len(self._blocks):
            pool = self._pools[-1].setdefault((tile.shape, tile.dtype, tile.memory), [])
            if all(t is not tile for t in pool):  # a second release must not hand it out twice
                pool.append(tile)

    # --- statements --------------------------------------------------------------------------
    def copy(self, engine: str, dst: TileRegion, src: TileRegion) -> None:
        """``dst = src`` (with a cast) on ``engine``. Where the instruction specification gives the
        target's engine no ``tensor_copy`` (the Scalar engine of NeuronCore-v2), the same copy is an
        identity ``activation``, so callers balance evictions across engines without naming a target."""
        if engine not in instr_spec("tensor_copy").engines[self.target.nc_version]:
            self.activation(dst, op="copy", data=src)
        else:
            self.tensor_copy(dst, src=src, engine=engine)

    def dma(self, dst: HBMAccess | TileRegion, src: HBMAccess | TileRegion) -> None:
        self.add(Dma(dst, src))

    def finish(self) -> Kernel:
        """The kernel, with consecutive one-operator VectorE ``tensor_scalar`` s paired
        (``ts_pairs``: one pass instead of two, bit-identical values)."""
        from .ts_pairs import fuse_tensor_scalar_pairs  # ts_pairs reads builder's IR types only
        return fuse_tensor_scalar_pairs(Kernel(self.name, list(self.params.values()), self.outputs, self.body,
                                               self.provenance, self.plan))


def instr_of(spec: InstrSpec, dst: TileRegion, engine: str | None = None, **keywords: Any) -> Instr:
    """The ``Instr`` calling ``nisa.<spec.name>(dst, **keywords)`` on ``engine`` (default: the
    specification's): tile keywords become ``srcs``, the rest ``attrs``, each in keyword order; a
    keyword given as None is left out (the instruction's own default applies)."""
    keywords = {k: v for k, v in keywords.items() if v is not None}
    unknown = [k for k in keywords if k not in spec.keywords]
    if unknown:
        raise TypeError(f"nisa.{spec.name} has no keyword {unknown[0]!r} (it takes {', '.join(spec.keywords)})")
    srcs = {k: keywords[k] for k in spec.keywords if k in keywords and k in spec.tiles}
    attrs = {k: keywords[k] for k in spec.keywords if k in keywords and k not in spec.tiles}
    return Instr(Engine(engine or spec.default_engine), spec.name, dst, srcs, attrs)


def _emitter(spec: InstrSpec) -> Callable[..., None]:
    """``KernelBuilder.<spec.name>(dst, *, <keywords>, engine=<default>)``: emit one instruction."""
    def emit(self: Emitter, dst: TileRegion, /, *, engine: str | None = None, **keywords: Any) -> None:
        self.add(instr_of(spec, dst, engine, **keywords))
    kw = inspect.Parameter.KEYWORD_ONLY
    emit.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY),
         inspect.Parameter("dst", inspect.Parameter.POSITIONAL_ONLY, annotation=TileRegion)]
        + [inspect.Parameter(k, kw, default=None) for k in spec.keywords]
        + [inspect.Parameter("engine", kw, default=Engine(spec.default_engine), annotation=Engine)],
        return_annotation=None)
    emit.__name__ = emit.__qualname__ = spec.name
    emit.__doc__ = (f"Emit ``nisa.{spec.name}(dst, {', '.join(spec.keywords)})``; tile operands: "
                    f"{', '.join(spec.tiles) or 'none'}; engines: {', '.join(spec.all_engines())}.")
    return emit


for _name in COMPUTE_INSTRS:
    if _name not in vars(Emitter):  # ``memset`` keeps its literal-spelling wrapper
        setattr(Emitter, _name, _emitter(INSTRS[_name]))


FLOAT_DTYPES = ("float32", "bfloat16", "float16")
_INT_RANGE = {"int32": (-2**31, 2**31 - 1), "uint8": (0, 255), "int8": (-128, 127),
              "int16": (-2**15, 2**15 - 1), "uint16": (0, 2**16 - 1), "uint32": (0, 2**32 - 1)}


def literal(value, dtype: str):
    """``value`` as a Python literal of hardware dtype ``dtype``: float for float tiles, int (infinities
    clamped to the type's range) for integer tiles."""
    if dtype in FLOAT_DTYPES:
        return float(value)
    lo, hi = _INT_RANGE[dtype]
    if isinstance(value, float) and (value != value):
        return 0
    if isinstance(value, float) and abs(value) == float("inf"):
        return lo if value < 0 else hi
    return int(value)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)
