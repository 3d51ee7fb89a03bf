"""A recording front end for kernels written in the classic ``neuronxcc.nki`` API.

Why: published NKI kernels with measured latencies (NKIBench, arXiv 2511.15915) are written in the
classic API (``nl.load``/``nl.store``, ``nl.arange`` index grids, ``nl.affine_range`` loops, block
dimensions before ``nl.par_dim``). To price *the exact instruction streams that were measured* with our
cost model, we run such a kernel against a shim ``neuronxcc.nki`` namespace whose calls record tile-IR
statements (``Loop``/``Alloc``/``Dma``/``Instr`` of neuron_inductor.ir.nodes) instead of computing.

How a kernel is read:
* ``nl.affine_range(n)`` / ``nl.sequential_range(n)`` yield one sympy loop variable and record a
  ``Loop``: the body is traced once, as the cost model summarises it. A Python ``for ... in
  range(...)`` in a kernel's source is a ``sequential_range`` loop, as the Neuron compiler makes it
  ("Inside a NKI kernel, any use of Python range(...) will be replaced with sequential_range(...)",
  ``nki.language.sequential_range``, classic NKI docs): its iterations get no loop-level
  pipelining, which is what NKIBench's rope measured (see ``load_kernel_source``);
* on-chip arrays ``nl.ndarray((blocks..., par_dim(P), free...))`` become one IR ``Tile`` of the
  per-block shape ``(P, free...)``; block indices select a buffer and do not enter the cost; the tile
  is allocated in the innermost loop enclosing every access to it (the compiler allocates per block);
* index grids (``nl.arange(n)[:, None] + 128 * i``), slices and scalars become regions of tiles and
  access patterns into flat HBM tensors; a ``mask=`` of the form ``c - arange >= 0`` shrinks the
  masked axis (ragged last tiles);
* instructions map onto our specification with the engine the Neuron compiler picks for classic
  calls: ``nl.copy`` is a ScalarE copy (NKIBench's matmul profiles show ScalarE, not VectorE, busy
  with PSUM evictions), ``nisa.tensor_scalar(engine=unknown_engine)`` goes where ``ENGINE_POLICY``
  says, ``nisa.reciprocal`` and ``nl.loop_reduce`` are VectorE ALU ops, ``nl.matmul(x, y)`` is a
  TensorE transpose of ``x`` (plus its PSUM eviction) and a matmul.

Nothing here executes numerics; a call the shim does not know raises ``NotImplementedError`` naming it.
"""
from __future__ import annotations

import ast
import contextlib
import math
import sys
import types
from dataclasses import dataclass

import numpy as np

from neuron_inductor.ir.nodes import HBMTensor, Kernel

import nki_classic_core as _core
from nki_classic_build import SPILL_SHARE, _build
from nki_classic_core import (Buf, ENGINE_POLICY, HBM, HView, View, _Acc, _Op, _Par, _Recorder,
                              _alu, _dt, _full, _instr, _lim, _operand, _range, _unmasked, arange)

__all__ = ["HBMArg", "ENGINE_POLICY", "load_kernel_source", "trace_kernel"]

# --- nl / nisa calls ------------------------------------------------------------------------------
def ndarray(shape, dtype=np.float32, buffer=None, name="", **_kw):
    buffer = buffer or "sbuf"
    if buffer in ("shared_hbm", "hbm", "private_hbm"):
        t = HBMTensor(_core.REC.name("out"), math.prod(int(s) for s in shape), _dt(dtype), "output")
        _core.REC.outputs.append(t)
        return HBM(t, shape)
    return Buf(shape, dtype, buffer)


def zeros(shape, dtype=np.float32, buffer=None, name="", lazy_initialization=False, **_kw):
    b = ndarray(shape, dtype, buffer)
    if isinstance(b, Buf) and b.memory == "sbuf" and not lazy_initialization:
        _core.REC.emit(_Op("instr", "vector", "memset", b.view(), {}, {}))
    return b


def full(shape, fill_value=0, dtype=np.float32, buffer=None, **kw):
    return zeros(shape, dtype, buffer, **kw)


def shared_constant(arr, dtype=None):
    arr = np.asarray(arr)
    t = HBMTensor(_core.REC.name("const"), arr.size, _dt(dtype or arr.dtype), "input")
    _core.REC.params.append(t)
    return HBM(t, arr.shape)


def load(src: HView, dtype=None, mask=None, **_kw):
    lim = _lim(mask)
    src = src.masked(lim)
    full_ = [_unmasked(c) for c in src.sizes]
    if len(full_) == 1:
        full_.append(1)
    buf = Buf((full_[0], math.prod(full_[1:])), dtype or src.hbm.dtype, "sbuf")
    buf.fresh = True
    dst = View(buf, [0, 0], [src.sizes[0] if src.sizes else 1, math.prod(src.sizes[1:]) if len(src.sizes) > 1 else 1],
               [0, 1])
    _core.REC.emit(_Op("dma", "dma", "load", dst, {"src": src}, {}))
    return buf


def store(dst: HView, value=None, mask=None, **_kw):
    lim = _lim(mask)
    _core.REC.emit(_Op("dma", "dma", "store", dst.masked(lim), {"src": _operand(value).masked(lim)}, {}))


def copy(x, dtype=None, mask=None, **_kw):
    return _instr("scalar", "tensor_copy", x, dtype, mask, srcs={"src": _operand(x)})


def _unary_act(name):
    def f(x, dtype=None, mask=None, **_kw):
        return _instr("scalar", "activation", x, dtype, mask)
    f.__name__ = name
    return f


def _binary(name):
    def f(a, b, dtype=None, mask=None, **_kw):
        return _alu(None, a, b, name, mask, dtype)
    f.__name__ = name
    return f


def _reduce(name):
    def f(x, axis=None, dtype=None, mask=None, keepdims=False, **_kw):
        return _instr("vector", "tensor_reduce", x, dtype, mask, free=1)
    f.__name__ = name
    return f


def loop_reduce(x, op=None, loop_indices=None, dtype=None, mask=None, **_kw):
    return _instr("vector", "tensor_tensor", x, dtype, mask, srcs={"data1": _operand(x), "data2": _operand(x)})


def nc_matmul(stationary, moving, is_transpose=False, mask=None, **_kw):
    st, mv = _operand(stationary), _operand(moving)
    lim = _lim(mask)
    m = math.prod(_full(st)[1:])
    buf = Buf((m, math.prod(_full(mv)[1:])), "float32", "psum")
    buf.fresh = True
    dst = buf.view()
    dst.sizes = [math.prod(st.sizes[1:]), math.prod(mv.sizes[1:])]
    op = _core.REC.emit(_Op("instr", "tensor", "nc_matmul", dst.masked(lim),
                      {"stationary": st.masked(lim), "moving": mv.masked(lim)}, {}))
    return _Acc(op, buf)


def nl_matmul(x, y, transpose_x=False, mask=None, **_kw):
    x_ = _operand(x)
    if not transpose_x:  # TensorE transpose of x through PSUM, then the matmul
        ident = Buf((x_.sizes[0], x_.sizes[0]), x_.dtype, "sbuf")
        t = nc_matmul(x_, ident.view(), is_transpose=True)
        x_ = _operand(copy(t.fresh))
    return nc_matmul(x_, y, mask=mask)


def activation(op=None, data=None, bias=None, scale=1.0, dtype=None, mask=None, **_kw):
    srcs = {"data": _operand(data)}
    for k, v in (("bias", bias), ("scale", scale)):
        if isinstance(v, (Buf, View)):
            srcs[k] = _operand(v)
    return _instr("scalar", "activation", data, dtype, mask, srcs=srcs)


def tensor_scalar(data=None, op0=None, operand0=None, dtype=None, mask=None, engine=None, **kw):
    srcs = {"data": _operand(data)}
    for k, v in (("operand0", operand0), ("operand1", kw.get("operand1"))):
        if isinstance(v, (Buf, View)):
            srcs[k] = _operand(v)
    eng = engine if isinstance(engine, str) else ENGINE_POLICY["tensor_scalar"]
    return _instr(eng, "tensor_scalar", data, dtype, mask, srcs=srcs)


def tensor_tensor(data1=None, data2=None, op=None, dtype=None, mask=None, engine=None, **_kw):
    eng = engine if isinstance(engine, str) else "vector"
    return _instr(eng, "tensor_tensor", data1, dtype, mask, srcs={"data1": _operand(data1), "data2": _operand(data2)})


def tensor_reduce(op=None, data=None, axis=None, dtype=None, mask=None, **_kw):
    return _instr("vector", "tensor_reduce", data, dtype, mask, free=1, srcs={"data": _operand(data)})


def reciprocal(data=None, dtype=None, mask=None, **_kw):
    return _instr("vector", "tensor_scalar", data, dtype, mask)


def memset(shape=None, value=0, dtype=np.float32, mask=None, engine=None, **_kw):
    buf = Buf(shape, dtype, "sbuf")
    buf.fresh = True
    _core.REC.emit(_Op("instr", "vector", "memset", buf.view(), {}, {}))
    return buf


def tensor_tensor_scan(data0=None, data1=None, initial=None, op0=None, op1=None, dtype=None, mask=None, **_kw):
    return _instr("vector", "tensor_tensor_scan", data0, dtype, mask,
                  srcs={"data0": _operand(data0), "data1": _operand(data1)})


class _Unknown:
    def __getattr__(self, name):
        raise NotImplementedError(f"classic NKI front end: {name} is not modelled")


def _modules() -> dict[str, types.ModuleType]:
    nl = types.ModuleType("neuronxcc.nki.language")
    nisa = types.ModuleType("neuronxcc.nki.isa")
    nki = types.ModuleType("neuronxcc.nki")
    nt = types.ModuleType("neuronxcc.nki.typing")
    root = types.ModuleType("neuronxcc")
    nl.__dict__.update(
        arange=arange, affine_range=_range("affine"), sequential_range=_range("sequential"),
        static_range=range, par_dim=_Par, ndarray=ndarray, zeros=zeros, full=full,
        shared_constant=shared_constant, load=load, store=store, copy=copy, matmul=nl_matmul,
        loop_reduce=loop_reduce, sbuf="sbuf", psum="psum", hbm="hbm", shared_hbm="shared_hbm",
        private_hbm="private_hbm", float32="float32", bfloat16="bfloat16", float16="float16",
        tile_size=types.SimpleNamespace(pmax=128, psum_fmax=512, gemm_stationary_fmax=128,
                                        gemm_moving_fmax=512),
        sum=_reduce("sum"), max=_reduce("max"), min=_reduce("min"), mean=_reduce("mean"))
    for n in ("add", "subtract", "multiply", "maximum", "minimum", "divide"):
        setattr(nl, n, _binary(n))
    for n in ("exp", "square", "rsqrt", "sqrt", "tanh", "sigmoid", "silu", "gelu", "log", "relu",
              "reciprocal", "negative", "abs"):
        setattr(nl, n, _unary_act(n))
    nisa.__dict__.update(nc_matmul=nc_matmul, activation=activation, tensor_scalar=tensor_scalar,
                         tensor_tensor=tensor_tensor, tensor_reduce=tensor_reduce,
                         reciprocal=reciprocal, memset=memset, tensor_tensor_scan=tensor_tensor_scan,
                         unknown_engine=None, vector_engine="vector", scalar_engine="scalar",
                         gpsimd_engine="gpsimd")
    nki.__dict__.update(jit=lambda f=None, **kw: f if f is not None else (lambda g: g),
                        language=nl, isa=nisa, typing=nt, trace=lambda f=None, **kw: f)
    root.nki = nki
    return {"neuronxcc": root, "neuronxcc.nki": nki, "neuronxcc.nki.language": nl,
            "neuronxcc.nki.isa": nisa, "neuronxcc.nki.typing": nt}


@contextlib.contextmanager
def _shim():
    saved = {k: sys.modules.get(k) for k in _modules()}
    sys.modules.update(_modules())
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def trace_kernel(fn, args: list, name: str) -> Kernel:
    """Run classic-NKI kernel ``fn`` on ``args`` (``HBMArg`` shapes, or Python scalars) and return the
    tile-IR kernel it issues."""
    _core.REC = _Recorder()
    SPILL_SHARE.clear()
    try:
        with _shim():
            params = []
            call = []
            for i, a in enumerate(args):
                if isinstance(a, HBMArg):
                    t = HBMTensor(f"in{i}", math.prod(a.shape), a.dtype, "input")
                    params.append(t)
                    call.append(HBM(t, a.shape))
                else:
                    call.append(a)
            fn(*call)
            body = _build(_core.REC)
            return Kernel(name, params + _core.REC.params, _core.REC.outputs, body)
    finally:
        _core.REC = None


@dataclass
class HBMArg:
    shape: tuple[int, ...]
    dtype: str = "float32"


#: the name a kernel's Python ``range`` loops are rewritten to call (``_RangeAsSequential``)
_SEQUENTIAL_RANGE = "__nki_classic_sequential_range__"


class _RangeAsSequential(ast.NodeTransformer):
    """Rewrites ``for ... in range(...)`` into a ``sequential_range`` loop, as the Neuron compiler
    does with classic NKI kernels (``nki.language.sequential_range``: "any use of Python range(...)
    will be replaced with sequential_range(...)"). Only ``for`` statements: a ``range`` elsewhere
    (a comprehension building a Python list) stays Python, since the shim traces a loop once."""

    def visit_For(self, node: ast.For) -> ast.For:
        self.generic_visit(node)
        it = node.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range":
            it.func = ast.copy_location(ast.Name(_SEQUENTIAL_RANGE, ast.Load()), it.func)
        return node


def load_kernel_source(source: str, filename: str = "<kernel>"):
    """The ``kernel`` function of a classic-NKI module's source, imported against the shim, with its
    Python ``range`` loops read as the compiler reads them (``_RangeAsSequential``)."""
    tree = ast.fix_missing_locations(_RangeAsSequential().visit(ast.parse(source, filename)))
    ns: dict = {"__name__": "nki_classic_kernel", _SEQUENTIAL_RANGE: _range("sequential")}
    with _shim():
        exec(compile(tree, filename, "exec"), ns)
    return ns["kernel"]

