"""The random ops behind dropout (``rand``, ``rand_like``, ``uniform``, ``bernoulli.p``,
``native_dropout``; also ``exponential``, a Gumbel router's noise) as a counter-based generator in integer ops we lower.

Stream: a call draws a two-word key ``(k0, k1)`` from torch's default generator on the host
(``aten.randint`` of two int32, the only host step; ``torch.manual_seed`` therefore reproduces a
run, and every call advances the generator so successive steps get fresh masks). Element ``i`` (its
flat index, the counter) gets

    h = mix(mix(i * 0x9E3779B9 ^ k0) ^ k1),   mix = Wellons' "lowbias32" (xor-shift-multiply),

all in int32 arithmetic wrapping modulo 2**32 like torch's (the lowering builds the wrapping multiply
from 16-bit halves whose products never leave 32 bits, ``lowering/int_wrap.py``: the NKI docs
promise exact 32-bit integer results, not wrap-around; VectorE bit ops), and the top ``m`` bits of
``h`` scaled by 2**-m are the uniform value in [0, 1), ``m`` the dtype's significand width (24 for
fp32, 8 for bf16, 11 for fp16), so no rounding can reach 1.0. The values are therefore a pure
function of (key, index): reproducible from the key and the element offset, identical between the
compiled kernels and an eager evaluation of this decomposition.

They are *not* torch's bits: eager CPU uses mt19937 and its own draw order. What matches eager is
the distribution (uniform on [0, 1) at the dtype's resolution; a ``bernoulli(p)``/dropout keep
rate of ``1 - p``), which is what the tests check, with determinism under a fixed seed and dropout's
backward reusing the forward's mask (``native_dropout`` returns the mask; its backward reads it).
``randn`` (Box-Muller needs log and cos at full range) and ops with an explicit ``generator`` stay
declared fallbacks.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

#: the largest key draw the lowering runs as a host generator step rather than a fallback
KEY_NUMEL = 2
_GOLDEN = -1640531527        # 0x9E3779B9 as int32
_M1, _M2 = 0x7FEB352D, -2073254261   # lowbias32 multipliers (0x846CA68B as int32)
_BITS = {torch.float32: 24, torch.bfloat16: 8, torch.float16: 11}


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int32 ``x`` by ``s``: torch's ``>>`` is arithmetic, the mask drops the
    copied sign bits."""
    return aten.bitwise_and.Scalar(aten.__rshift__.Scalar(x, s), (1 << (32 - s)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    x = aten.bitwise_xor.Tensor(x, _shr(x, 16))
    x = aten.mul.Tensor(x, _M1)
    x = aten.bitwise_xor.Tensor(x, _shr(x, 15))
    x = aten.mul.Tensor(x, _M2)
    return aten.bitwise_xor.Tensor(x, _shr(x, 16))


def uniform_bits(shape, dtype: torch.dtype, device) -> torch.Tensor:
    """Uniform [0, 1) values of ``dtype`` and ``shape`` from a fresh key (see the module doc)."""
    numel = 1
    for s in shape:
        numel *= int(s)
    key = aten.randint.low(-(1 << 31), (1 << 31) - 1, [KEY_NUMEL], dtype=torch.int32, device=device)
    k0, k1 = aten.slice.Tensor(key, 0, 0, 1), aten.slice.Tensor(key, 0, 1, 2)
    i = aten.arange.start_step(0, numel, 1, dtype=torch.int32, device=device)
    i = aten.view.default(i, list(shape))
    k0 = aten.view.default(k0, [1] * len(shape))
    k1 = aten.view.default(k1, [1] * len(shape))
    h = _mix(aten.bitwise_xor.Tensor(aten.mul.Tensor(i, _GOLDEN), k0))
    h = _mix(aten.bitwise_xor.Tensor(h, k1))
    m = _BITS[dtype]
    top = _shr(h, 32 - m)
    return aten.mul.Tensor(aten._to_copy.default(top, dtype=dtype), 2.0 ** -m)


def _legal(shape, dtype, generator=None) -> bool:
    n = 1
    for s in shape:
        n *= int(s)
    return generator is None and dtype in _BITS and 0 < n < (1 << 31)


def rand(size, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None):
    dtype = dtype or torch.get_default_dtype()
    if not _legal(size, dtype, generator):
        return NotImplemented
    return uniform_bits(size, dtype, device)


def rand_like(x: torch.Tensor, *, dtype=None, layout=None, device=None, pin_memory=None,
              memory_format=None):
    dtype = dtype or x.dtype
    if not _legal(x.shape, dtype):
        return NotImplemented
    return uniform_bits(x.shape, dtype, x.device)


def uniform(x: torch.Tensor, low: float = 0.0, high: float = 1.0, *, generator=None):
    """``x.uniform_(low, high)`` functionally: ``low + (high - low) * u``."""
    if not _legal(x.shape, x.dtype, generator):
        return NotImplemented
    u = uniform_bits(x.shape, x.dtype, x.device)
    return aten.add.Tensor(aten.mul.Tensor(u, float(high) - float(low)), float(low))


def bernoulli_p(x: torch.Tensor, p: float = 0.5, *, generator=None):
    """1 with probability ``p`` (``u < p``), in ``x``'s dtype."""
    dt = x.dtype if x.dtype in _BITS else torch.float32
    if not _legal(x.shape, dt, generator):
        return NotImplemented
    hit = aten.lt.Scalar(uniform_bits(x.shape, torch.float32, x.device), float(p))
    return aten._to_copy.default(hit, dtype=x.dtype)


def exponential(x: torch.Tensor, lambd: float = 1.0, *, generator=None):
    """``x.exponential_(lambd)`` functionally: ``-log(1 - u) / lambd`` (inverse CDF; ``1 - u`` lies in
    (0, 1], so the log is finite). PhiMoE's router samples Gumbel noise this way in training."""
    if not _legal(x.shape, x.dtype, generator):
        return NotImplemented
    u = uniform_bits(x.shape, torch.float32, x.device)
    e = aten.mul.Tensor(aten.log.default(aten.rsub.Scalar(u, 1.0)), -1.0 / float(lambd))
    return aten._to_copy.default(e, dtype=x.dtype) if x.dtype != torch.float32 else e


def native_dropout(x: torch.Tensor, p: float, train: bool | None):
    """(x * mask / (1 - p), mask) with ``mask = u >= p`` (kept with probability ``1 - p``)."""
    if not train or p == 0:
        return x, aten.full_like.default(x, True, dtype=torch.bool)
    if p >= 1:
        return aten.mul.Tensor(x, 0.0), aten.full_like.default(x, False, dtype=torch.bool)
    if not _legal(x.shape, torch.float32):
        return NotImplemented
    keep = aten.ge.Scalar(uniform_bits(x.shape, torch.float32, x.device), float(p))
    out = aten.mul.Tensor(aten.mul.Tensor(x, keep), 1.0 / (1.0 - p))
    return out, keep


#: op -> decomposition, merged into the table by ``decompositions.decomposition_table``
RANDOM_DECOMPOSITIONS = {
    aten.rand.default: rand,
    aten.rand_like.default: rand_like,
    aten.uniform.default: uniform,
    aten.bernoulli.p: bernoulli_p,
    aten.exponential.default: exponential,
    aten.native_dropout.default: native_dropout,
}
