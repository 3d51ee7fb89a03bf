"""ALU operators and activation functions, computed in fp32 on numpy.

Each ``nl.<op>`` the simulator knows is an :class:`Op` object: a name and a vectorised numpy function
(arithmetic: fp32 in, fp32 out; comparisons and logical ops: 1.0/0.0 out; bitvec: exact on int64).
Which operator is legal where (and its class) is the instruction specification's business
(:mod:`neuron_inductor.spec`); this module only computes.  erf has no scipy/torch dependency: a Maclaurin series for |x| < 3
and the asymptotic erfc expansion beyond, evaluated in float64 (error far below 1e-7).
All evaluation happens under ``np.errstate(all="ignore")``: division by zero and log(0) yield
inf/nan as the hardware would, without warnings.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np


class Op:
    __slots__ = ("name", "fn")

    def __init__(self, name: str, fn: Callable) -> None:
        self.name = name
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


ACTIVATIONS: dict[str, Op] = {name: Op(name, _f32(fn)) for name, fn in {
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
    BINARY[_name] = Op(_name, _f32(_fn))
for _name, _fn in {"equal": np.equal, "not_equal": np.not_equal, "greater": np.greater,
                   "greater_equal": np.greater_equal, "less": np.less,
                   "less_equal": np.less_equal}.items():
    BINARY[_name] = Op(_name, _cmp(_fn))
for _name, _fn in {"logical_and": np.logical_and, "logical_or": np.logical_or,
                   "logical_xor": np.logical_xor}.items():
    BINARY[_name] = Op(_name, _logical(_fn))
for _name, _fn in {"abs_max": lambda a, b: np.maximum(np.abs(a), np.abs(b)),
                   "abs_min": lambda a, b: np.minimum(np.abs(a), np.abs(b))}.items():
    BINARY[_name] = Op(_name, _f32(_fn))
for _name, _fn in {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
                   "bitwise_xor": np.bitwise_xor,
                   # a 32-bit word shifted left drops the bits moved past bit 31 (as a signed word)
                   "left_shift": lambda a, b: (((np.asarray(a).astype(np.int64) << b) & 0xFFFFFFFF)
                                               ^ 0x80000000) - 0x80000000,
                   "right_shift": lambda a, b: (a & 0xFFFFFFFF) >> b,
                   "invert": lambda a, b: np.invert(a)}.items():
    BINARY[_name] = Op(_name, _fn)

#: ops that may be used as a reduction (``tensor_reduce`` / ``activation(reduce_op=)``)
REDUCERS: dict[str, Callable] = {"add": np.add.reduce, "maximum": np.maximum.reduce,
                                 "minimum": np.minimum.reduce, "multiply": np.multiply.reduce}

ALL_OPS: dict[str, Op] = {**ACTIVATIONS, **BINARY}


#: GpSimd's native 32-bit integer arithmetic (all-int32/uint32 tensor_tensor), computed on int64 and
#: wrapped to 32 bits by the caller; comparisons give 1/0
INT_NATIVE: dict[str, Callable] = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum,
    "minimum": np.minimum, "power": np.power,
    **{n: (lambda f: lambda a, b: f(a, b).astype(np.int64))(f) for n, f in {
        "equal": np.equal, "not_equal": np.not_equal, "greater": np.greater,
        "greater_equal": np.greater_equal, "less": np.less, "less_equal": np.less_equal}.items()},
}


def unary_alu(name: str) -> Callable:
    """The numpy function of a unary ALU operator (abs, square, relu, rsqrt, reciprocal): the same
    math as the activation function of that name, with the operand ignored."""
    fn = ACTIVATIONS[name].fn
    return lambda a, _b: fn(a)
