"""Integer semantics equal torch's: wrap-around, promotion, exact comparisons, or a declared fallback.

Every integer op we lower, per dtype, on values at the type's limits, negative and random, across a
ragged number of 128-row tiles, compared exactly with eager. The only ops allowed to run eagerly are
the declared refusals: integer sums and max/min not proven exact in fp32.
"""
from __future__ import annotations

import pytest
import torch

from _ops import check_cases

from neuron_inductor import stats

INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
#: ops that may be declared fallbacks (and which dtypes may need them)
DECLARED = {"aten.sum.dim_IntList": {torch.int32, torch.int64},
            "aten.amax.default": {torch.int32, torch.int64}, "aten.amin.default": {torch.int32, torch.int64}}


def _values(dtype: torch.dtype, rows: int = 130, cols: int = 9, seed: int = 0) -> torch.Tensor:
    """Limits, their neighbours, -1/0/1 and random values of ``dtype``, as a [rows, cols] tensor."""
    if dtype == torch.bool:
        return torch.rand(rows, cols, generator=torch.Generator().manual_seed(seed)) > 0.5
    info = torch.iinfo(dtype)
    special = [info.min, info.min + 1, -1, 0, 1, 2, info.max - 1, info.max, info.max // 3,
               info.min // 3, 2**24 + 1, -(2**24) - 1, 2**31 - 1, -(2**31), 2**33 + 5, -(2**40)]
    special = [v for v in special if info.min <= v <= info.max]
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(info.min, info.max, (rows * cols,), generator=g, dtype=torch.int64)
    x[:len(special)] = torch.tensor(special)
    x[rows * cols // 2: rows * cols // 2 + len(special)] = torch.tensor(special[::-1])
    return x.reshape(rows, cols).to(dtype)


def _check(fn, args, dtype):
    stats.reset("fallback_ops")
    check_cases(fn, [args], fallback="warn", _allow_fallback=True)
    bad = {k: v for k, v in stats.fallback_ops().items() if dtype not in DECLARED.get(k.split("(")[0], ())}
    assert not bad, f"undeclared fallbacks for {dtype}: {bad}"


@pytest.mark.smoke
@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_arithmetic_wraps(dtype):
    a, b = _values(dtype), _values(dtype, seed=1).flip(0)
    _check(lambda a, b: (a + b, a - b, a * b, -a, a.abs(), a * 3, a + 200, a - 7, 5 - a), (a, b), dtype)


@pytest.mark.smoke
@pytest.mark.parametrize("dtype", INTS + [torch.bool], ids=str)
def test_comparisons_exact(dtype):
    a, b = _values(dtype), _values(dtype, seed=1).flip(0)
    outs = lambda a, b: (a == b, a != b, a > b, a >= b, a < b, a <= b, a == a, a > 0, a <= 1)  # noqa: E731
    if dtype != torch.bool:
        extra = lambda a, b: (a > 2**33, a == 2**24 + 1, a < -(2**31), a >= 100)  # noqa: E731
        _check(lambda a, b: outs(a, b) + extra(a, b), (a, b), dtype)
    else:
        _check(outs, (a, b), dtype)


@pytest.mark.smoke
@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_min_max_where_clamp(dtype):
    a, b = _values(dtype), _values(dtype, seed=1).flip(0)
    _check(lambda a, b: (torch.maximum(a, b), torch.minimum(a, b), torch.where(a > b, a, b),
                         torch.where(a < 0, a, 0), a.clamp(-5, 100), a.clamp(min=0)), (a, b), dtype)


#: scalar clamp bounds in and out of every dtype's range: torch <= 2.14 wraps some out-of-range
#: bounds (uint8: -5 -> 251) and refuses others, torch 2.15 compares them exactly
CLAMP_BOUNDS = [(-5, 100), (None, 300), (-300, None), (300, None), (None, -300), (-(2**40), 2**40),
                (50, 10), (None, 2**31), (-1, None), (0, 255), (2**40, None)]


def _eager_accepts(a, lo, hi) -> bool:
    try:
        a.clamp(lo, hi)
    except RuntimeError:
        return False
    return True


@pytest.mark.smoke
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32], ids=str)
def test_clamp_bounds_follow_the_running_torch(dtype):
    """Every scalar clamp the running torch accepts equals eager (no fallback); one it refuses raises
    in the compiled call too (a declared fallback: eager's own error), never a number."""
    a = _values(dtype)
    ok = [b for b in CLAMP_BOUNDS if _eager_accepts(a, *b)]
    stats.reset("fallback_ops")
    check_cases(lambda a: tuple(a.clamp(lo, hi) for lo, hi in ok), [(a,)])
    refused = [b for b in CLAMP_BOUNDS if b not in ok]
    assert refused  # every torch refuses min=2**40
    for lo, hi in refused[:1]:
        torch._dynamo.reset()
        with pytest.raises(RuntimeError):
            torch.compile(lambda a: a.clamp(lo, hi) + 1, backend="neuron", options={"fallback": "warn"})(a)


@pytest.mark.parametrize("dtype", INTS + [torch.bool], ids=str)
def test_bitwise(dtype):
    a, b = _values(dtype), _values(dtype, seed=1).flip(0)
    _check(lambda a, b: (a & b, a | b, a ^ b, a & 1), (a, b), dtype)


@pytest.mark.smoke
@pytest.mark.parametrize("dtype", INTS + [torch.bool], ids=str)
def test_casts_wrap(dtype):
    a = _values(dtype)
    _check(lambda a: tuple(a.to(d) for d in INTS + [torch.bool, torch.float32] if d != dtype), (a,), dtype)


@pytest.mark.parametrize("dtype", INTS + [torch.bool], ids=str)
def test_sum_promotes(dtype):
    """torch sums integers (and bools) into int64; small types are exact in fp32 here, int32 and
    int64 of unknown range are declared fallbacks."""
    a = _values(dtype)
    _check(lambda a: (a.sum(-1), a.sum(0), (a > 0).sum(-1), a.amax(-1), a.amin(0)), (a,), dtype)


def test_issue_repros():
    """The reported cases: each gives torch's answer (or runs eagerly, declared)."""
    r = torch.randint(0, 2**31 - 1, (300,), dtype=torch.int64, generator=torch.Generator().manual_seed(0))
    t = torch.randint(0, 128256, (300,), dtype=torch.int64, generator=torch.Generator().manual_seed(1))
    i = torch.tensor([2**30, -(2**30), 2**31 - 1, 5], dtype=torch.int32)
    u = torch.tensor([100, 200, 0, 255], dtype=torch.uint8)
    big = torch.tensor([2**33, 2**33 + 1, -5, 2**40], dtype=torch.int64)
    stats.reset("fallback_ops")
    check_cases(lambda r, t, i, u, big: (r * 128256 + t, i * 3, u + 200, i.sum(), big > 2**33, big + big),
                [(r, t, i, u, big)], fallback="warn", _allow_fallback=True)
    assert set(k.split("(")[0] for k in stats.fallback_ops()) <= set(DECLARED), stats.fallback_ops()


def test_positions_against_int64_rows():
    """A small value (an ``arange``) against int64 rows read from HBM (label ids, cache positions):
    the fp32 compare with the low word is exact where the row fits in int32, the sign decides
    elsewhere (one-hot compares and causal masks keep their one full-width compare)."""
    special = [2**33, -(2**40), 5, -1, 0, 8, 2**31, -(2**31) - 1, 2**32 + 3, 3]
    idx = torch.tensor(special * 13, dtype=torch.int64).reshape(130, 1)
    _check(lambda idx: (torch.arange(9) == idx, torch.arange(9) < idx, torch.arange(9) >= idx,
                        torch.arange(9) != idx, idx > torch.arange(9), idx <= torch.arange(9) - 4,
                        torch.arange(9).view(1, 9) == idx.view(130, 1).expand(130, 9)),
           (idx,), torch.int64)


def test_int64_differences_against_zero():
    """Causal / window masks from int64 positions read from HBM: ``q - k <= 0`` and friends on word
    pairs (the sign of the high word, and lo | hi == 0)."""
    special = [2**33, -(2**40), 5, -1, 0, 8, 2**31, -(2**31) - 1, 2**32, 3]
    q = torch.tensor(special * 13, dtype=torch.int64).reshape(130, 1)
    k = torch.tensor(special[::-1], dtype=torch.int64).reshape(1, 10)
    _check(lambda q, k: ((q - k) <= 0, (q - k) > 0, (q - k) == 0, (q - k) != 0, (q - k) < 0,
                         (k - q) >= 0, 0 > (q - k)), (q, k), torch.int64)


def _far_int64(rows: int = 130, cols: int = 7, seed: int = 3) -> torch.Tensor:
    """int64 values far outside int32: around +-2^40, at low-word carry/borrow edges, and full range."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(2**40 - 1000, 2**40 + 1000, (rows * cols,), generator=g)
    x[1::3] *= -1
    x[2::5] = torch.randint(-2**62, 2**62, (len(x[2::5]),), generator=g)
    edges = [2**32 - 1, 2**32, -(2**32), -(2**32) - 1, 2**40 + 2**31 - 1, 2**40 + 2**31, -(2**40) - 2**31,
             2**63 - 1, -(2**63), 2**62 + 1, 0, -1, 1]
    x[:len(edges)] = torch.tensor(edges)
    return x.reshape(rows, cols)


@pytest.mark.parametrize("k", [2, 3, 5, 7, 8, 11, 16, -3, -16, 17, 100, 2**20 + 1])
def test_int64_mul_by_constants_far_outside_int32(k):
    """Products by a constant on word pairs: exact (shift-and-add up to 16) or a declared fallback."""
    i = _far_int64()
    _check(lambda i: (i * k, k * i + 1), (i,), torch.int64)


def test_int64_where_neg_abs_far_outside_int32():
    """``torch.where(m, i * 3, -i)`` around 2^40 and friends give torch's numbers (word pairs kept
    through neg, abs, where, add/sub carries, comparisons and casts)."""
    i, j = _far_int64(), _far_int64(seed=4).flip(0)
    m = torch.rand(i.shape, generator=torch.Generator().manual_seed(5)) > 0.5
    _check(lambda i, j, m: (torch.where(m, i * 3, -i), -i, i.abs(), torch.where(m, -i, j.abs()),
                            i + j, i - j, i + (2**32 - 1), i - 2**31, i > j, i <= j, i == -j, i < -(2**40),
                            torch.maximum(i, j), i.to(torch.int32), i.to(torch.float32), i.to(torch.int16),
                            torch.where(i > 2**40, i, j) * 5), (i, j, m), torch.int64)


def test_int64_products_leaving_int32_are_exact_word_pair_products():
    """``r * 128256 + t`` and ``cumsum(mask) * mask`` (OPT / BLOOM positions) on int64 were declared
    fallbacks; they are word-pair products mod 2**64 now, wrapping like torch at the int64 limits."""
    g = torch.Generator().manual_seed(5)
    a = torch.randint(-2**62, 2**62, (300, 3), generator=g)
    b = torch.randint(-2**62, 2**62, (300, 3), generator=g)
    a[0] = torch.tensor([-2**63, 2**63 - 1, -1])
    b[0] = torch.tensor([-1, 2**63 - 1, 2**32 + 7])
    r = torch.randint(0, 2**31 - 1, (300, 3), generator=g)
    mask = (b > 0).long()
    stats.reset("fallback_ops")
    check_cases(lambda a, b, r, m: (a * b, r * 128256 + m, torch.cumsum(m, 1) * m - 1, a * r),
                [(a, b, r, mask)])
    assert not stats.fallback_ops(), stats.fallback_ops()


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_pow_wraps_like_repeated_multiplication(dtype):
    """Integer ``pow`` wraps as torch's does: a constant exponent is square-and-multiply on the
    wrapping multiply (uint8 3 ** 5 = 243, 113 ** 3 = 113 wrapped); a tensor exponent (or a
    scalar base) is a declared fallback. fp32 power saturated: 113 ** 3 gave 255."""
    a = _values(dtype)
    _check(lambda a: (a ** 5, a ** 7, a ** 4 + 1), (a,), dtype)
    e = torch.randint(0, 6, a.shape, generator=torch.Generator().manual_seed(2)).to(dtype)
    stats.reset("fallback_ops")
    check_cases(lambda a, e: (a ** e, 3 ** e, a ** e[0, 0]), [(a, e)], fallback="warn", _allow_fallback=True)
    assert {k.split("(")[0] for k in stats.fallback_ops()} <= {"aten.pow.Tensor_Tensor", "aten.pow.Scalar"}


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
def test_row_broadcast_is_bit_exact(dtype):
    """A per-row integer column ([N, 1]: labels, positions) used against a full tile: broadcast as two
    16-bit halves through fp32 (a bitvec ``tensor_scalar`` may not take an int32 tile operand), so
    the limits, -1 and values above 2**24 keep every bit."""
    row = _values(dtype, cols=1)
    full = _values(dtype, seed=1)
    _check(lambda r, f: (r | f, r ^ f, r == f, torch.where(f > 0, r, f), r.expand(130, 9) & -1),
           (row, full), dtype)
