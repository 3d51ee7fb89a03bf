"""ALU operators and activation functions, computed in fp32 on numpy.

Each ``nl.<op>`` the contract names is an :class:`Op` object: a name, a kind and a vectorised numpy
function.  ``kind`` is ``"arith"`` (fp32 in, fp32 out), ``"compare"``/``"logical"`` (fp32 in, 1.0/0.0
out) or ``"bitvec"`` (integer operands only, computed exactly on int64).  Unary activation
functions have kind ``"act"``.  erf has no scipy/torch dependency: a Maclaurin series for |x| < 3
and the asymptotic erfc expansion beyond, evaluated in float64 (error far below 1e-7).
All evaluation happens under ``np.errstate(all="ignore")``: division by zero and log(0) yield
inf/nan as the hardware would, without warnings.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np


class Op:
    __slots__ = ("name", "kind", "fn")

    def __init__(self, name: str, kind: str, fn: Callable) -> None:
        self.name = name
        self.kind = kind
        self.fn = fn

    def __call__(self, *args, **kwargs):
        raise TypeError(f"nl.{self.name}(...) as a tile function is not supported by the "
                        "neuron_inductor simulator; pass it as op=/op0= to a nisa instruction")

    def __repr__(self) -> str:
        return f"nl.{self.name}"


_SQRT2 = math.sqrt(2.0)
_2_SQRTPI = 2.0 / math.sqrt(math.pi)


def erf(x: np.ndarray) -> np.ndarray:
    """erf in float64 internally, returned as float32."""
    x64 = np.asarray(x, dtype=np.float64)
    ax = np.abs(x64)
    small = np.minimum(ax, 3.0)
    # Maclaurin: erf(x) = 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1))
    x2 = small * small
    term = small.copy()
    acc = small.copy()
    for n in range(1, 80):
        term *= -x2 / n
        acc += term / (2 * n + 1)
    series = acc * _2_SQRTPI
    # asymptotic erfc for |x| >= 3: e^{-x^2}/(x sqrt(pi)) * sum (-1)^n (2n-1)!! / (2x^2)^n
    big = np.maximum(ax, 3.0)
    inv = 1.0 / (2.0 * big * big)
    s = np.ones_like(big)
    t = np.ones_like(big)
    for n in range(1, 9):
        t *= -(2 * n - 1) * inv
        s += t
    with np.errstate(all="ignore"):
        tail = 1.0 - np.exp(-big * big) / (big * math.sqrt(math.pi)) * s
    r = np.where(ax < 3.0, series, tail)
    r = np.where(np.isinf(ax), 1.0, r)
    return (np.sign(x64) * r).astype(np.float32)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + erf(x / np.float32(_SQRT2)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = np.float32(math.sqrt(2.0 / math.pi))
    return 0.5 * x * (1.0 + np.tanh(c * (x + np.float32(0.044715) * x * x * x)))


def _f32(fn: Callable) -> Callable:
    return lambda *a: np.asarray(fn(*a), dtype=np.float32)


def _cmp(fn: Callable) -> Callable:
    return lambda a, b: fn(a, b).astype(np.float32)


def _logical(fn: Callable) -> Callable:
    return lambda a, b: fn(a != 0, b != 0).astype(np.float32)


ACTIVATIONS: dict[str, Op] = {name: Op(name, "act", _f32(fn)) for name, fn in {
    "copy": lambda x: x,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "reciprocal": lambda x: 1.0 / x,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "relu": lambda x: np.maximum(x, np.float32(0)),
    "gelu": _gelu,
    "gelu_apprx_tanh": _gelu_tanh,
    "silu": lambda x: x * _sigmoid(x),
    "erf": erf,
    "abs": np.abs,
    "negative": np.negative,
    "sign": np.sign,
    "square": np.square,
    "sin": np.sin,
    "cos": np.cos,
}.items()}

BINARY: dict[str, Op] = {}
for _name, _fn in {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
                   "divide": np.divide, "maximum": np.maximum, "minimum": np.minimum,
                   "power": np.power}.items():
    BINARY[_name] = Op(_name, "arith", _f32(_fn))
for _name, _fn in {"equal": np.equal, "not_equal": np.not_equal, "greater": np.greater,
                   "greater_equal": np.greater_equal, "less": np.less,
                   "less_equal": np.less_equal}.items():
    BINARY[_name] = Op(_name, "compare", _cmp(_fn))
for _name, _fn in {"logical_and": np.logical_and, "logical_or": np.logical_or,
                   "logical_xor": np.logical_xor}.items():
    BINARY[_name] = Op(_name, "logical", _logical(_fn))
for _name, _fn in {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
                   "bitwise_xor": np.bitwise_xor,
                   # shifts of 32-bit patterns; right_shift is logical (arithmetic is unsupported)
                   "left_shift": lambda a, b: (a << b) & 0xFFFFFFFF,
                   "right_shift": lambda a, b: (a & 0xFFFFFFFF) >> b}.items():
    BINARY[_name] = Op(_name, "bitvec", _fn)

#: unary ALU operators (``tbl-aluop`` "Arithmetic Unary"): ``tensor_scalar(op0=..., operand0=0.0)``
UNARY_ALU = frozenset({"abs", "square", "relu", "rsqrt", "reciprocal"})

#: ops that may be used as a reduction (``tensor_reduce`` / ``activation(reduce_op=)``)
REDUCERS: dict[str, Callable] = {"add": np.add.reduce, "maximum": np.maximum.reduce,
                                 "minimum": np.minimum.reduce, "multiply": np.multiply.reduce}

ALL_OPS: dict[str, Op] = {**ACTIVATIONS, **BINARY}

# numpy ufuncs (classic NKI accepted np.add etc.) map onto the same ops
_UFUNCS = {np.add: "add", np.subtract: "subtract", np.multiply: "multiply", np.divide: "divide",
           np.maximum: "maximum", np.minimum: "minimum", np.power: "power", np.equal: "equal",
           np.not_equal: "not_equal", np.greater: "greater", np.greater_equal: "greater_equal",
           np.less: "less", np.less_equal: "less_equal", np.logical_and: "logical_and",
           np.logical_or: "logical_or", np.logical_xor: "logical_xor",
           np.bitwise_and: "bitwise_and", np.bitwise_or: "bitwise_or",
           np.bitwise_xor: "bitwise_xor", np.exp: "exp", np.log: "log", np.sqrt: "sqrt",
           np.tanh: "tanh", np.abs: "abs", np.negative: "negative", np.sign: "sign",
           np.square: "square", np.sin: "sin", np.cos: "cos"}


def as_op(op: object) -> Op | None:
    """The :class:`Op` for an ``nl`` op or a numpy ufunc; None if unknown."""
    if isinstance(op, Op):
        return op
    name = _UFUNCS.get(op)  # type: ignore[call-overload]
    return ALL_OPS[name] if name else None
