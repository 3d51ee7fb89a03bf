"""Core of the classic-NKI recording front end (nki_classic.py): index grids, the recorder, HBM
tensors and on-chip arrays, and the helpers that record one instruction."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy

from neuron_inductor.ir.nodes import HBMAccess, HBMTensor, Tile, TileRegion, loop_var

#: engine for ``nisa.tensor_scalar(engine=unknown_engine)`` and ``nl`` elementwise calls with a
#: scalar operand: ScalarE, as NKIBench's profiles show (AdamW's ScalarE active time is its nine
#: scalar ops' worth, silu's its exp plus the ``+ 1``)
ENGINE_POLICY = {"tensor_scalar": "scalar"}


def _dt(x: Any) -> str:
    if isinstance(x, str):
        return {"float": "float32"}.get(x, x)
    try:
        return np.dtype(x).name
    except TypeError:
        return "float32"


# --- index algebra --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Term:
    axis: int | None
    size: int
    coeff: Any


class Idx:
    """An affine index grid: ``const + sum(coeff * arange(size) on broadcast axis)``."""

    def __init__(self, terms: tuple[_Term, ...], const: Any = 0) -> None:
        self.terms, self.const = terms, const

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        axis = [i for i, k in enumerate(key) if isinstance(k, slice)]
        assert len(self.terms) == 1 and len(axis) == 1, "arange()[...] takes one ':'"
        t = self.terms[0]
        return Idx((_Term(axis[0], t.size, t.coeff),), self.const)

    def _lin(self, other, sign=1):
        if isinstance(other, Idx):
            return Idx(self.terms + tuple(_Term(t.axis, t.size, sign * t.coeff) for t in other.terms),
                       self.const + sign * other.const)
        return Idx(self.terms, self.const + sign * other)

    def __add__(self, o):
        return self._lin(o)

    __radd__ = __add__

    def __sub__(self, o):
        return self._lin(o, -1)

    def __rsub__(self, o):
        return (-self)._lin(o)

    def __neg__(self):
        return self * -1

    def __mul__(self, k):
        return Idx(tuple(_Term(t.axis, t.size, t.coeff * k) for t in self.terms), self.const * k)

    __rmul__ = __mul__

    def __ge__(self, o):
        return Mask(self - o)

    def __gt__(self, o):
        return Mask(self - o - 1)

    def __le__(self, o):
        return Mask(o - self)

    def __lt__(self, o):
        return Mask(o - self - 1)


class Mask:
    """``expr >= 0``; understood when ``expr`` has one term with a negative coefficient."""

    def __init__(self, expr: Idx) -> None:
        self.expr = expr

    def __and__(self, other):
        return _Masks([self, other])

    def limits(self) -> dict[int, Any]:
        terms = [t for t in self.expr.terms if t.coeff != 0]
        if len(terms) != 1 or not (isinstance(terms[0].coeff, (int, sympy.Integer)) and terms[0].coeff < 0):
            return {}
        t = terms[0]
        bound = sympy.floor(sympy.sympify(self.expr.const) / -t.coeff) + 1
        return {t.axis: sympy.Min(t.size, sympy.Max(0, bound))}


class _Masks(Mask):
    def __init__(self, masks):
        self.masks = masks

    def limits(self):
        out = {}
        for m in self.masks:
            out.update(m.limits())
        return out


def arange(*args) -> Idx:
    n = len(range(*args))
    start = args[0] if len(args) > 1 else 0
    return Idx((_Term(None, n, 1),), start)


class _Par(int):
    """``nl.par_dim(n)``: marks the partition axis of an on-chip array's shape."""


# --- recorder -------------------------------------------------------------------------------------
@dataclass(eq=False)
class _LoopRec:
    var: sympy.Symbol
    extent: int
    kind: str
    body: list = field(default_factory=list)


@dataclass(eq=False)
class _Op:
    kind: str                 # "instr" | "dma"
    engine: str
    op: str
    dst: Any
    srcs: dict
    attrs: dict


class _Recorder:
    def __init__(self) -> None:
        self.root: list = []
        self.stack: list[_LoopRec] = []
        self.access: dict[Any, list[tuple]] = {}
        self.params: list[HBMTensor] = []
        self.outputs: list[HBMTensor] = []
        self.n = 0
        self.last: _Op | None = None

    def body(self) -> list:
        return self.stack[-1].body if self.stack else self.root

    def touch(self, buf) -> None:
        self.access.setdefault(buf, []).append(tuple(self.stack))

    def emit(self, op: _Op) -> _Op:
        for r in [op.dst, *op.srcs.values()]:
            if isinstance(r, View):
                self.touch(r.buf)
        self.body().append(op)
        self.last = op
        return op

    def name(self, p: str) -> str:
        self.n += 1
        return f"{p}{self.n}"


REC: _Recorder | None = None


def _range(kind):
    def rng(*args, **_kw):
        r = range(*args)
        var = loop_var(f"i{REC.n}")
        REC.n += 1
        lp = _LoopRec(var, len(r), kind)
        REC.body().append(lp)
        REC.stack.append(lp)
        try:
            yield r.start + r.step * var
        finally:
            REC.stack.pop()
    return rng


# --- HBM tensors ----------------------------------------------------------------------------------
class HBM:
    """A flat HBM tensor seen with a row-major ``shape``."""

    def __init__(self, t: HBMTensor, shape: tuple[int, ...]) -> None:
        self.t, self.shape = t, tuple(int(s) for s in shape)
        self.dtype = t.dtype

    def reshape(self, shape):
        return HBM(self.t, shape)

    def __getitem__(self, key) -> "HView":
        key = key if isinstance(key, tuple) else (key,)
        key = _expand(key, len(self.shape))
        strides = [math.prod(self.shape[i + 1:]) for i in range(len(self.shape))]
        offset, axes, nslice = 0, {}, 0
        for d, (k, st) in enumerate(zip(key, strides)):
            if isinstance(k, slice):
                a, b = k.start or 0, self.shape[d] if k.stop is None else k.stop
                axes[("s", nslice)] = [st, sympy.sympify(b - a)]
                offset += a * st
                nslice += 1
            elif isinstance(k, Idx):
                offset += k.const * st
                for t in k.terms:
                    ax = ("a", t.axis)
                    if ax in axes:  # a second grid term on the same axis: strides add
                        axes[ax][0] += t.coeff * st
                    else:
                        axes[ax] = [t.coeff * st, t.size]
            else:
                offset += k * st
        order = sorted(axes, key=lambda a: (a[0] == "s", a[1] if a[1] is not None else 0))
        return HView(self, offset, [(axes[a][0], axes[a][1], a[1] if a[0] == "a" else a[1]) for a in order])


def _expand(key, n):
    if any(k is Ellipsis for k in key):
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (n - len(key) + 1) + key[i + 1:]
    return key + (slice(None),) * (n - len(key))


class HView:
    def __init__(self, hbm: HBM, offset, pattern) -> None:
        self.hbm, self.offset, self.pattern = hbm, offset, pattern  # [(stride, count, axis)]

    def masked(self, lim):
        pat = [(s, lim.get(ax, c) if ax is not None else c, ax) for s, c, ax in self.pattern]
        return HView(self.hbm, self.offset, pat)

    def build(self) -> HBMAccess:
        pat = tuple((s, c) for s, c, _ in self.pattern) or ((1, 1),)
        return HBMAccess(self.hbm.t, self.offset, pat)

    @property
    def sizes(self):
        return [c for _, c, _ in self.pattern]


# --- on-chip buffers ------------------------------------------------------------------------------
class Buf:
    """An on-chip array: ``blocks`` of ``(P, free...)`` tiles in SBUF or PSUM."""

    def __init__(self, shape, dtype, memory: str, name: str = "t") -> None:
        shape = tuple(shape)
        par = [i for i, s in enumerate(shape) if isinstance(s, _Par)]
        cut = par[0] if par else 0
        self.blocks = tuple(int(s) for s in shape[:cut])
        self.tshape = tuple(int(s) for s in shape[cut:])
        if len(self.tshape) == 1:
            self.tshape = self.tshape + (1,)
        self.dtype, self.memory = _dt(dtype), memory
        self.tile = Tile(REC.name(name), self.tshape, self.dtype, memory)
        self.shape = self.tshape
        self.fresh = False

    def view(self) -> "View":
        return View(self, [0] * len(self.tshape), list(self.tshape), [0, 1] + [None] * (len(self.tshape) - 2))

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        if key == (Ellipsis,):
            return self.view()
        nb = len(self.blocks)
        key_all = key
        key = _expand(key[nb:] if len(key) > len(self.tshape) else key, len(self.tshape))
        starts, sizes, axes, nslice = [], [], [], 0
        for d, k in enumerate(key):
            if isinstance(k, slice):
                a, b = k.start or 0, self.tshape[d] if k.stop is None else k.stop
                starts.append(a), sizes.append(sympy.sympify(b - a)), axes.append(nslice)
                nslice += 1
            elif isinstance(k, Idx):
                starts.append(k.const)
                sizes.append(math.prod(t.size for t in k.terms))
                axes.append(k.terms[0].axis if len(k.terms) == 1 else None)
            else:
                starts.append(k), sizes.append(1), axes.append(None)
        v = View(self, starts, sizes, axes)
        v.blk = tuple(key_all[:nb]) if len(key_all) > len(self.tshape) else ()
        return v

    def __setitem__(self, key, value):
        self[key].assign(value)

    # a bare tile used as an operand
    def _v(self):
        return self.view()

    def broadcast_to(self, shape):
        return self.view().broadcast_to(shape)

    def __iadd__(self, other):
        self.view().iadd(other)
        return self

    def __truediv__(self, k):
        return _alu("tensor_scalar", self, k, "divide")

    def __mul__(self, k):
        return _alu(None, self, k, "multiply")

    def __add__(self, k):
        return _alu(None, self, k, "add")

    def __sub__(self, k):
        return _alu(None, self, k, "subtract")


class View:
    def __init__(self, buf: Buf, starts, sizes, axes) -> None:
        self.buf, self.starts, self.sizes, self.axes = buf, list(starts), list(sizes), list(axes)
        self.blk: tuple = ()

    @property
    def shape(self):
        return tuple(self.sizes)

    @property
    def dtype(self):
        return self.buf.dtype

    def masked(self, lim):
        v = View(self.buf, self.starts, [lim.get(a, s) if a is not None else s
                                         for s, a in zip(self.sizes, self.axes)], self.axes)
        v.blk = self.blk
        return v

    def build(self) -> TileRegion:
        return TileRegion(self.buf.tile, tuple(self.starts), tuple(self.sizes))

    def _v(self):
        return self

    def __getitem__(self, key):
        return self  # sub-views of views only appear as full re-selections in these kernels

    def broadcast_to(self, shape):
        return View(self.buf, [0] + self.starts[1:], [shape[0]] + self.sizes[1:], self.axes)

    def assign(self, value) -> None:
        if isinstance(value, _Done):
            return
        if isinstance(value, _Acc):
            if value.op.dst.buf is not self.buf:
                REC.access.pop(value.op.dst.buf, None)
            value.op.dst = self
            value.op.attrs["accumulate"] = True
            REC.touch(self.buf)
            return
        if isinstance(value, Buf) and REC.last is not None and isinstance(REC.last.dst, View) \
                and REC.last.dst.buf is value and value.fresh:
            REC.access.pop(value, None)
            REC.last.dst = self.masked(REC.last.attrs.pop("_lim", {}))
            REC.touch(self.buf)
            return
        if isinstance(value, View) and value.buf is self.buf:
            return  # in-place result
        if isinstance(value, (Buf, View)):
            REC.emit(_Op("instr", "vector", "tensor_copy", self, {"src": value._v()}, {}))
        else:
            REC.emit(_Op("instr", "vector", "memset", self, {}, {}))

    def iadd(self, other) -> "_Acc | None":
        if isinstance(other, _Acc):
            if other.op.dst.buf is not self.buf:
                REC.access.pop(other.op.dst.buf, None)
            other.op.dst = self
            other.op.attrs["accumulate"] = True
            REC.touch(self.buf)
            return other
        REC.emit(_Op("instr", "vector", "tensor_tensor", self, {"data1": self, "data2": other._v()}, {}))
        return None

    def __iadd__(self, other):
        return self.iadd(other) or _Done()

    def __truediv__(self, k):
        return _alu("tensor_scalar", self, k, "divide")

    def __mul__(self, k):
        return _alu(None, self, k, "multiply")


class _Done:
    """What ``view += x`` leaves for the following ``__setitem__`` when the add was already emitted."""


class _Acc:
    """A matmul result waiting to be accumulated into a PSUM view (``psum[...] += nc_matmul(...)``)."""

    def __init__(self, op: _Op, fresh: Buf) -> None:
        self.op, self.fresh = op, fresh


def _operand(x):
    if isinstance(x, (Buf, View)):
        return x._v()
    return x


def _out(src_view: View, dtype=None, free=None, memory="sbuf") -> View:
    parts = src_view.sizes[0]
    fs = _full(src_view)
    f = free if free is not None else math.prod(fs[1:])
    buf = Buf((fs[0], max(1, f)), dtype or src_view.dtype, memory)
    buf.fresh = True
    v = buf.view()
    v.sizes = [parts] + ([math.prod(src_view.sizes[1:])] if free is None else [free])
    return v


def _unmasked(s) -> int:
    """The size of an axis before masking (masked sizes are ``Min(size, bound)`` expressions)."""
    s = sympy.sympify(s)
    if s.is_number:
        return int(s)
    if isinstance(s, sympy.Min):
        return int(max(a for a in s.args if a.is_number))
    return int(s.subs({x: 0 for x in s.free_symbols}))


def _full(v: View):
    return [_unmasked(s) for s in v.sizes]


def _lim(mask) -> dict:
    return mask.limits() if isinstance(mask, Mask) else {}


def _instr(engine, op, data, dtype=None, mask=None, free=None, srcs=None, attrs=None, memory="sbuf"):
    lim = _lim(mask)
    d = _operand(data)
    dst = _out(d, dtype, free, memory)
    s = {k: (v.masked(lim) if isinstance(v, View) else v) for k, v in (srcs or {"data": d}).items()}
    opr = REC.emit(_Op("instr", engine, op, dst.masked(lim), s, dict(attrs or {})))
    opr.attrs["_lim"] = lim
    return dst.buf


def _small(x) -> bool:
    return not isinstance(x, (Buf, View)) or math.prod(_full(x._v())[1:]) == 1


def _alu(kind, a, b, opname, mask=None, dtype=None):
    a_, b_ = _operand(a), _operand(b)
    if _small(b) and not _small(a):
        return _instr(ENGINE_POLICY["tensor_scalar"], "tensor_scalar", a_, dtype, mask,
                      srcs={"data": a_, **({"operand0": b_} if isinstance(b_, View) else {})})
    if _small(a) and not _small(b):
        return _instr(ENGINE_POLICY["tensor_scalar"], "tensor_scalar", b_, dtype, mask,
                      srcs={"data": b_, **({"operand0": a_} if isinstance(a_, View) else {})})
    if not isinstance(b_, View):
        return _instr(ENGINE_POLICY["tensor_scalar"], "tensor_scalar", a_, dtype, mask)
    return _instr("vector", "tensor_tensor", a_, dtype, mask, srcs={"data1": a_, "data2": b_})


