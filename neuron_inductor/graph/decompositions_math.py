"""Float classification and base-2/base-10 math as ops the kernels already have.

ScalarE has ``exp`` and ``log`` (natural base) and no ``isnan``: ``isnan(x)`` is IEEE's ``x != x``,
``isinf`` compares ``|x|`` with infinity, and the other bases scale by a constant. Integer inputs are
never NaN or infinite (torch returns all-False for them), so those fold to constants. ``pow`` with a
Python-number base is ``exp(x * ln(base))`` for a positive base; other bases keep torch's own
decomposition (or a declared fallback)."""
from __future__ import annotations

import math

import torch

aten = torch.ops.aten

DECOMPOSITIONS: dict = {}


def _register(*ops):
    def deco(fn):
        for op in ops:
            DECOMPOSITIONS[op] = fn
        return fn
    return deco


def _false(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(x, dtype=torch.bool)


@_register(aten.isnan.default)
def isnan(x: torch.Tensor) -> torch.Tensor:
    return torch.ne(x, x) if x.is_floating_point() else _false(x)


@_register(aten.isinf.default)
def isinf(x: torch.Tensor) -> torch.Tensor:
    return torch.eq(torch.abs(x), math.inf) if x.is_floating_point() else _false(x)


@_register(aten.isposinf.default)
def isposinf(x: torch.Tensor) -> torch.Tensor:
    return torch.eq(x, math.inf) if x.is_floating_point() else _false(x)


@_register(aten.isneginf.default)
def isneginf(x: torch.Tensor) -> torch.Tensor:
    return torch.eq(x, -math.inf) if x.is_floating_point() else _false(x)


@_register(aten.isfinite.default)
def isfinite(x: torch.Tensor) -> torch.Tensor:
    if not x.is_floating_point():
        return torch.ones_like(x, dtype=torch.bool)
    return torch.logical_and(torch.eq(x, x), torch.ne(torch.abs(x), math.inf))


def _scaled(fn, scale: float):
    def decomp(x: torch.Tensor) -> torch.Tensor:
        if not x.is_floating_point():
            return NotImplemented
        # in float32 like eager's kernels: a bf16 ``x * ln2`` would round before the exp amplifies it
        return fn(x.float(), scale).to(x.dtype)
    return decomp


_register(aten.exp2.default)(_scaled(lambda x, s: torch.exp(x * s), math.log(2.0)))
_register(aten.log2.default)(_scaled(lambda x, s: torch.log(x) * s, 1 / math.log(2.0)))
_register(aten.log10.default)(_scaled(lambda x, s: torch.log(x) * s, 1 / math.log(10.0)))


@_register(aten.pow.Scalar)
def pow_scalar_base(base, exponent: torch.Tensor) -> torch.Tensor:
    if not exponent.is_floating_point() or isinstance(base, (complex, bool)) or not base > 0:
        return NotImplemented
    if base == 1:
        return torch.ones_like(exponent)
    return torch.exp(exponent.float() * math.log(base)).to(exponent.dtype)


def _floor_div_pow2(a: torch.Tensor, b) -> torch.Tensor:
    """Integer floor division by a positive power of two is an arithmetic right shift, exact for
    every value (a chunked-attention mask's ``(kv_idx - pad) // chunk_size``); other divisors keep
    the declared fallback (the engines divide in float32, inexact beyond 2^24)."""
    if (a.is_floating_point() or a.dtype == torch.bool or isinstance(b, bool) or not isinstance(b, int)
            or b <= 0 or b & (b - 1)):
        return NotImplemented
    return torch.bitwise_right_shift(a, b.bit_length() - 1)


@_register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(a: torch.Tensor, b, *, rounding_mode=None) -> torch.Tensor:
    if rounding_mode != "floor":
        return NotImplemented
    return _floor_div_pow2(a, b)


@_register(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(a: torch.Tensor, b) -> torch.Tensor:
    return _floor_div_pow2(a, b)


#: adding and subtracting 2**23 rounds a float32 ``0 <= t < 2**23`` to the nearest integer (ties to
#: even): the sum lies in [2**23, 2**24), where float32's spacing is exactly 1
_TWO_23 = 8388608.0


def _rounding(kind: str):
    """floor / ceil / trunc / round of a float tensor with adds, compares and selects.

    The engines have no rounding instruction; float32 addition rounds to the nearest integer once
    the sum's spacing is 1, so ``|x|`` is rounded that way and corrected by one where the rounding
    went the other side. The result always has ``x``'s sign (floor(-0.3) = -1, ceil(-0.3) = -0),
    so the magnitude is rounded and the sign put back: floor of a negative number is minus the ceil
    of its magnitude. ``|x| >= 2**23`` (and ±inf) is already an integer and passes through; NaN
    propagates. bf16/fp16 round in float32 (exact: their integers are float32 integers). One
    difference: -0.0 comes back as +0.0 (equal as numbers)."""
    def decomp(x: torch.Tensor) -> torch.Tensor:
        if not x.is_floating_point() or x.dtype == torch.float64:
            return NotImplemented
        xf = x.float()
        t = torch.abs(xf)
        r = (t + _TWO_23) - _TWO_23
        if kind == "round":
            mag = r
        else:
            down = r - torch.gt(r, t).float()   # trunc of |x|
            up = r + torch.lt(r, t).float()     # ceil of |x|
            neg = torch.lt(xf, 0.0)
            mag = {"trunc": down, "floor": torch.where(neg, up, down),
                   "ceil": torch.where(neg, down, up)}[kind]
        out = torch.where(torch.lt(xf, 0.0), -mag, mag)
        return torch.where(torch.ge(t, _TWO_23), xf, out).to(x.dtype)
    return decomp


_register(aten.floor.default)(_rounding("floor"))
_register(aten.ceil.default)(_rounding("ceil"))
_register(aten.trunc.default)(_rounding("trunc"))
_register(aten.round.default)(_rounding("round"))
