"""The tiled Trainium IR.

Data, not strings: lowering builds these objects, the verifier checks them against a ``Target``, the
printer dumps them for humans, the cost model walks them, and only codegen turns them into NKI text.

Nodes are frozen: every field is declared and set when the node is built (what a tensor is for, the
host value a parameter binds, the loop depth a tile was allocated at), so a later stage reads what
the lowering decided; an instruction's operand and attribute maps are ``FrozenMap``s. Only the
statement lists of a ``Loop`` and a ``Kernel`` grow, while the builder fills them. Opcodes, engines
and operator names are checked against the instruction specification when an ``Instr`` is built: a
misspelt ALU operator or activation function fails there.

Memory model (the NKI memory hierarchy: HBM, SBUF, PSUM):
* every HBM tensor a kernel sees is a *flat span* (1-D) of device memory; logical shapes, strides,
  broadcasting, transposes and slices are all expressed as access patterns (``HBMAccess``) into it,
  so views never cost a copy;
* on-chip tiles (``Tile``) live in SBUF or PSUM and have the partition axis first (<= 128);
* index arithmetic is sympy, in the loop variables of enclosing ``Loop`` statements.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NoReturn, Union

import sympy

from ..spec import COMPUTE_INSTRS, ENGINES, INSTRS, Engine, check_op_names  # noqa: F401 - ENGINES re-exported

Expr = Union[sympy.Expr, int]

#: dtypes the hardware has, by NKI name, with their size in bytes (no 64-bit types exist)
DTYPE_BYTES: dict[str, int] = {
    "float32": 4, "bfloat16": 2, "float16": 2,
    "int32": 4, "uint32": 4, "int16": 2, "uint16": 2, "int8": 1, "uint8": 1,
}
FLOAT_DTYPES = frozenset({"float32", "bfloat16", "float16"})

MEMORIES = ("sbuf", "psum")


class LoopKind(StrEnum):
    """``nl.affine_range`` (iterations independent) or ``nl.sequential_range`` (carried dependency)."""

    affine = "affine"
    sequential = "sequential"


class FrozenMap(dict):
    """A ``dict`` that refuses every change after construction: an instruction's operands and
    attributes. Still a ``dict`` (printing, ``{**m}``, JSON and pickling work as for one)."""

    def _frozen(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("instruction operands and attributes are immutable; build a new Instr")

    __setitem__ = __delitem__ = __ior__ = _frozen  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _frozen  # type: ignore[assignment]

    def __reduce__(self):
        return (FrozenMap, (dict(self),))

    def __copy__(self) -> "FrozenMap":
        return self

    def __deepcopy__(self, memo: dict) -> "FrozenMap":
        import copy
        return FrozenMap({k: copy.deepcopy(v, memo) for k, v in self.items()})


def loop_var(name: str) -> sympy.Symbol:
    """A loop variable: a non-negative integer symbol."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


@dataclass(frozen=True, eq=False)
class HBMTensor:
    """A kernel parameter or output: a flat span of ``numel`` elements in HBM.

    ``kind`` is ``"input"`` (read only), ``"output"`` (allocated by the kernel as ``shared_hbm`` and
    returned) or ``"inout"`` (a parameter the kernel writes; returned as NKI requires for mutated
    parameters). ``host_name`` is the host program's value a parameter binds (None for outputs).
    """

    name: str
    numel: int
    dtype: str
    kind: str = "input"
    host_name: str | None = None

    def __post_init__(self) -> None:
        assert self.dtype in DTYPE_BYTES, f"HBM tensor {self.name}: dtype {self.dtype} has no hardware type"
        assert self.kind in ("input", "output", "inout"), self.kind

    def __repr__(self) -> str:
        return f"HBM({self.name}:{self.dtype}[{self.numel}],{self.kind})"


@dataclass(frozen=True, eq=False)
class Tile:
    """An on-chip buffer. ``shape[0]`` is the partition axis. ``depth`` is the loop-nest depth of the
    block that allocates it (the kernel body is 1): the builder recycles a tile only in that block."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    memory: str = "sbuf"
    depth: int = 0

    def __post_init__(self) -> None:
        assert self.memory in MEMORIES, self.memory
        assert self.dtype in DTYPE_BYTES, self.dtype
        assert len(self.shape) >= 2, f"tile {self.name}: on-chip tensors are at least 2-D"

    @property
    def bytes_per_partition(self) -> int:
        n = 1
        for s in self.shape[1:]:
            n *= s
        return n * DTYPE_BYTES[self.dtype]

    def full(self) -> "TileRegion":
        return TileRegion(self, tuple(0 for _ in self.shape), tuple(self.shape))

    def region(self, *sizes: Expr, starts: tuple[Expr, ...] | None = None) -> "TileRegion":
        """The region ``[0:sizes[0], 0:sizes[1], ...]`` (or from ``starts``)."""
        assert len(sizes) == len(self.shape)
        return TileRegion(self, tuple(starts) if starts else tuple(0 for _ in sizes), tuple(sizes))

    def __repr__(self) -> str:
        return f"Tile({self.name}:{self.memory}:{self.dtype}{list(self.shape)})"


@dataclass(frozen=True, eq=False)
class TileRegion:
    """A rectangular region ``tile[starts[i] : starts[i] + sizes[i], ...]``."""

    tile: Tile
    starts: tuple[Expr, ...]
    sizes: tuple[Expr, ...]

    @property
    def memory(self) -> str:
        return self.tile.memory

    @property
    def dtype(self) -> str:
        return self.tile.dtype

    @property
    def partitions(self) -> Expr:
        return self.sizes[0]


@dataclass(frozen=True, eq=False)
class HBMAccess:
    """An access pattern into a flat HBM tensor, mirroring NKI's ``tensor.ap(pattern=, offset=)``.

    ``pattern`` is ``((stride, count), ...)`` in elements, partition dimension first; the element read
    for index ``(p, f1, f2, ...)`` is ``offset + p*pattern[0][0] + f1*pattern[1][0] + ...``.
    With ``indirect`` set (a uint32 ``[P, 1]`` SBUF region), the partition term becomes
    ``indirect[p] * row``: a gather (load) or scatter (store) of rows. The hardware takes ``row`` from
    the shape of the tensor ``.ap`` is called on (the elements right of its dim 0), not from the
    pattern, so an indirect access names ``view``: the ``(rows, row)`` shape the flat tensor is
    reshaped to in the kernel, with ``row == pattern[0][0]``.
    """

    tensor: HBMTensor
    offset: Expr
    pattern: tuple[tuple[Expr, Expr], ...]
    indirect: TileRegion | None = None
    view: tuple[int, int] | None = None

    @property
    def sizes(self) -> tuple[Expr, ...]:
        return tuple(c for _, c in self.pattern)

    @property
    def dtype(self) -> str:
        return self.tensor.dtype


Operand = Union[TileRegion, float, int, bool]


@dataclass(frozen=True, eq=False)
class Loop:
    """``for var in nl.affine_range(extent)`` (kind ``affine``: iterations independent, PSUM ``+=``
    allowed) or ``nl.sequential_range`` (kind ``sequential``: carried dependency)."""

    var: sympy.Symbol
    extent: int
    kind: LoopKind = LoopKind.affine
    body: list["Stmt"] = field(default_factory=list)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", LoopKind(self.kind))


@dataclass(frozen=True, eq=False)
class Alloc:
    """Declare an on-chip tile (``nl.ndarray(shape, dtype, buffer=nl.sbuf|nl.psum)``)."""

    tile: Tile


@dataclass(frozen=True, eq=False)
class Dma:
    """One DMA: HBM -> SBUF (load) or SBUF -> HBM (store), as ``nisa.dma_copy(dst=, src=)``.
    Sizes of both sides must agree element for element; a dtype difference is a cast."""

    dst: Union[HBMAccess, TileRegion]
    src: Union[HBMAccess, TileRegion]

    @property
    def is_load(self) -> bool:
        return isinstance(self.src, HBMAccess)


#: instruction opcodes (``nisa`` function names) and the engines each may run on on some target;
#: read from the instruction specification (per-target engines are checked by the verifier)
OPCODES: dict[str, tuple[str, ...]] = {n: INSTRS[n].all_engines() for n in COMPUTE_INSTRS}


@dataclass(frozen=True, eq=False)
class Instr:
    """One engine instruction, mirroring a destination-first ``nisa`` call.

    ``srcs`` are the tile (or immediate) operands by their nisa keyword (``data``, ``data1``,
    ``stationary``, ``operand0``, ``bias``, ``predicate``, ...); ``attrs`` the non-tensor keywords
    (``op``, ``op0``, ``axis``, ``accumulate``, ``scale``, ``pattern``, ...). ALU and activation
    functions are named by their ``nl`` name (``"add"``, ``"exp"``) or ``spec`` enum member.
    """

    engine: Engine
    op: str
    dst: TileRegion
    srcs: dict[str, Operand] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.op in OPCODES, f"unknown opcode {self.op}"
        assert self.engine in OPCODES[self.op], f"{self.op} cannot run on {self.engine}"
        object.__setattr__(self, "engine", Engine(self.engine))
        object.__setattr__(self, "srcs", FrozenMap(self.srcs))
        object.__setattr__(self, "attrs", FrozenMap(self.attrs))
        check_op_names(self.op, self.attrs)


Stmt = Union[Loop, Alloc, Dma, Instr]


@dataclass(frozen=True, eq=False)
class Kernel:
    """One NKI kernel: HBM parameters in, ``shared_hbm`` outputs out, a body of statements.

    ``provenance`` names the FX nodes the kernel computes (it becomes the kernel docstring);
    ``plan`` is a one-paragraph description of the tile plan for humans.
    """

    name: str
    params: list[HBMTensor]
    outputs: list[HBMTensor]
    body: list[Stmt]
    provenance: list[str] = field(default_factory=list)
    plan: str = ""

    @property
    def returned(self) -> list[HBMTensor]:
        """What the kernel returns, in order: its outputs, then parameters it mutated."""
        return list(self.outputs) + [p for p in self.params if p.kind == "inout"]


def walk(stmts: list[Stmt]):
    """Every statement, depth first, with the tuple of enclosing loops."""
    def rec(body, loops):
        for s in body:
            yield s, loops
            if isinstance(s, Loop):
                yield from rec(s.body, loops + (s,))
    yield from rec(stmts, ())


class NameGen:
    """Readable unique names (``x_tile0``, ``acc1``) per kernel."""

    def __init__(self) -> None:
        self._counts: dict[str, itertools.count] = {}

    def __call__(self, prefix: str) -> str:
        c = self._counts.setdefault(prefix, itertools.count())
        return f"{prefix}{next(c)}"
