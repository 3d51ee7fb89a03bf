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
