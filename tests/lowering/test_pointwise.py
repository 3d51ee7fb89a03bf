"""Elementwise lowerings against eager, forward and backward, fp32 and bf16, with no fallbacks.

Every op runs on a single element, a ragged partition count (300 rows) in fp32 and bf16, and most on
>128 partitions with a free axis >512 (2 x 129 x 600), so tiling, ragged tails and free-axis chunking
all run. One compiled graph per op covers all of its cases (see _ops.check_cases).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from _ops import check_cases, randn

from neuron_inductor import stats
from neuron_inductor.ir.nodes import walk

BIG = (2, 129, 600)


def _cases(n_inputs: int, positive: bool = False, big: bool = True):
    def mk(shape, dtype):
        return tuple(randn(shape, dtype, positive, seed=i) for i in range(n_inputs))
    cases = [mk((1,), torch.float32), mk((300, 130), torch.float32), mk((300, 130), torch.bfloat16)]
    return cases + ([mk(BIG, torch.float32)] if big else [])


UNARY = {
    "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "reciprocal": torch.reciprocal, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "relu": torch.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu, "erf": torch.erf, "abs": torch.abs, "neg": torch.neg,
    "square": lambda x: x ** 2, "cube": lambda x: x ** 3, "pow_frac": lambda x: x ** 1.7,
    "pow_half": lambda x: x ** 0.5, "pow_m1": lambda x: x ** -1, "scalar_base": lambda x: 2.0 ** x,
    "sin": torch.sin, "cos": torch.cos, "log1p": torch.log1p, "expm1": torch.expm1,
}
POSITIVE = {"log", "sqrt", "rsqrt", "reciprocal", "pow_frac", "pow_half", "pow_m1", "log1p"}
#: the large shape for a representative subset only: the suite must stay fast
BIG_UNARY = {"exp", "gelu", "silu", "neg", "rsqrt", "sigmoid"}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name):
    check_cases(UNARY[name], _cases(1, name in POSITIVE, name in BIG_UNARY), grad=True)


BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "maximum": torch.maximum, "minimum": torch.minimum,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=0.5), "sub_alpha": lambda a, b: torch.sub(a, b, alpha=3),
    "pow": lambda a, b: a.abs().add(0.5) ** b, "rsub": lambda a, b: 1.5 - a * b,
    "scalar_ops": lambda a, b: (a + 2) * 3 - b / 4,
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name):
    # eager's pow backward rounds out, log(base) and each product to bf16 (about four roundings of
    # 2**-9 each, amplified by |exponent| up to 3); the fused kernel keeps fp32 throughout
    tol = dict(low_rtol=4e-2, low_atol=2e-2) if name == "pow" else {}
    check_cases(BINARY[name], _cases(2, big=name in ("add", "div", "maximum")), grad=True, **tol)


def test_alpha_scalar_operand():
    """alpha reaches the lowering as a scalar TVal; it used to be emitted as an unprintable operand."""
    check_cases(lambda a, b: torch.add(a, b, alpha=0.5), [(randn((4, 8)), randn((4, 8), seed=1))])


@pytest.mark.parametrize("bshape", [(130,), (300, 1), (1, 130), (1,)], ids=str)
def test_binary_broadcast(bshape):
    check_cases(lambda a, b: a * b + b, [(randn((300, 130)), randn(bshape, seed=1))], grad=True)


CMP = {"eq": torch.eq, "ne": torch.ne, "gt": torch.gt, "ge": torch.ge, "lt": torch.lt, "le": torch.le}


@pytest.mark.parametrize("name", sorted(CMP))
def test_comparisons(name):
    cases = []
    for dt in (torch.float32, torch.bfloat16):
        a = randn((300, 130), dt)
        b = a.clone()
        b[::2] = randn((150, 130), dt, seed=1)   # half the rows equal, so eq/ge/le see ties
        cases.append((a, b))
    # -0.3 rounds to -0.30078125 in bf16: eager compares against the rounded scalar
    x = torch.tensor([-0.30078125, -0.3, 0.0, 1.0]).to(torch.bfloat16)
    check_cases(lambda a, b: (CMP[name](a, b), CMP[name](a, 0.25), CMP[name](a, -0.3)),
                cases + [(x, x)])


def test_comparison_int_and_logical():
    a = torch.randint(-3, 3, (300, 130), dtype=torch.int32)
    b = torch.randint(-3, 3, (300, 130), dtype=torch.int32)
    check_cases(lambda a, b: ((a > b) & (a != 0) | ~(b == 1), torch.logical_xor(a > 0, b > 0)),
                [(a, b)])


def test_where():
    def fn(x, y):
        return torch.where(x > y, x, y * 2), torch.where(x > 0, x, 0.0), torch.where(x > 0, -1.0, x)
    check_cases(fn, _cases(2), grad=True)


def test_where_broadcast_condition():
    mask = torch.rand(300, 1, generator=torch.Generator().manual_seed(0)) > 0.5
    check_cases(lambda x, m: torch.where(m, x, -x), [(randn((300, 130)), mask)], grad=True)


@pytest.mark.parametrize("kind", ["both", "min", "max", "tensor"])
def test_clamp(kind):
    """bf16 bounds: eager compares against the bound rounded to bf16 (x = -0.30078125 passes
    ``x >= -0.3`` in bf16 and gets a gradient); the lowering must round the scalar the same way."""
    def fn(x, lo, hi):
        return {"both": lambda: x.clamp(-0.5, 0.7), "min": lambda: x.clamp(min=-0.3),
                "max": lambda: x.clamp(max=0.2), "tensor": lambda: torch.clamp(x, lo, hi)}[kind]()
    cases = [(randn(s, dt), randn(s[-1:], dt, seed=1) - 1, randn(s[-1:], dt, seed=2) + 1)
             for s, dt in [((1,), torch.float32), ((300, 130), torch.float32),
                           ((300, 130), torch.bfloat16)]]
    check_cases(fn, cases, grad=True)


@pytest.mark.parametrize("src,dst", [
    (torch.float32, torch.bfloat16), (torch.bfloat16, torch.float32), (torch.float32, torch.float16),
    (torch.float32, torch.int32), (torch.int32, torch.float32), (torch.bool, torch.float32),
    (torch.float32, torch.bool), (torch.int64, torch.float32), (torch.int32, torch.bfloat16),
], ids=str)
def test_casts(src, dst):
    x = randn((300, 130)) * 50
    x = x.to(src) if src != torch.bool else x > 0
    exact = torch.tensor([-2.7, -1.5, -0.5, 0.5, 1.5, 2.7, 100.9])  # float->int truncates to zero
    exact = exact.to(src) if src != torch.bool else exact > 0
    check_cases(lambda x: (x.to(dst), x.to(dst).to(torch.float32) * 2), [(x,), (exact,)])


def test_cast_grad_roundtrip():
    check_cases(lambda x: x.to(torch.bfloat16).float().exp(), [(randn((300, 130)),)], grad=True)


def test_long_pointwise_chain_is_one_kernel():
    stats.reset("compile")
    check_cases(lambda x, y: ((torch.sigmoid(x) * y).exp().clamp(max=3) + y).relu() / 3,
                [(randn(BIG), randn(BIG, seed=1))])
    assert stats.compiled()["kernels_generated"] == 1


@pytest.mark.parametrize("shape,rows", [((2, 129, 600), 120), ((300, 130), 125), ((1009,), 1)],
                         ids=str)
def test_flat_span_uses_many_partitions(shape, rows, tmp_path):
    """A contiguous elementwise kernel merges to one flat span; a span not divisible by 128 used to
    run on a single partition ([0:1, 0:2048] tiles). It now uses the largest divisor <= 128
    (a prime length still has only 1)."""
    check_cases(torch.exp, [(randn(shape),)], debug_dir=str(tmp_path))
    src = "".join(p.read_text() for p in tmp_path.rglob("kernels.py"))
    assert f"dst=t0[0:{rows}, " in src, src


def _adamw_step(theta, g, m, v):
    m_t = 0.9 * m + 0.1 * g
    v_t = 0.999 * v + 0.001 * g * g
    return (theta - 1e-5 * theta) - 0.01 * m_t / (torch.sqrt(v_t * 1000) + 1e-8)


def test_constant_multiplies_balance_onto_scalar_engine():
    """A chain of multiplies by constants (an AdamW step) puts some of them on ScalarE
    (``activation(copy, scale=c)``) instead of all on VectorE; results still match eager, forward
    and backward, fp32 and bf16."""
    cases = [tuple(randn((300, 130), dt, positive=(i == 3), seed=i) for i in range(4))
             for dt in (torch.float32, torch.bfloat16)]
    check_cases(_adamw_step, cases, grad=True)
    from torch.fx.experimental.proxy_tensor import make_fx

    from neuron_inductor import pipeline
    from neuron_inductor.config import get_config
    from neuron_inductor.graph.passes import run_passes
    args = [torch.empty((256, 512), device="meta") for _ in range(4)]
    gm = make_fx(lambda *a: (_adamw_step(*a),), tracing_mode="fake")(*args)
    lg = pipeline.partition_and_lower(run_passes(gm), get_config().replace(target="trn1", cache=False), "adamw")
    (k,) = lg.program.kernels
    acts = [s for s, _ in walk(k.body) if getattr(s, "op", None) == "activation" and s.attrs.get("op") == "copy"]
    assert len(acts) >= 3, [getattr(s, "op", None) for s, _ in walk(k.body)]


def _row_chain(x, y, r):
    h = x * y + y          # tensor-tensor work on VectorE first
    return -(h * r) / 3.0  # then a multiply by a per-row value, a neg and a division by a constant


def test_row_multiply_neg_and_division_balance_onto_scalar_engine():
    """After VectorE's tensor-tensor ops, a multiply by an fp32 row (``activation``'s [P, 1] scale), a
    neg and a division by a constant go to ScalarE as ``activation(copy, scale=...)``: the same fp32
    multiplies, so results match eager (ragged rows, fp32 and bf16, backward)."""
    cases = [(randn((300, 130), dt), randn((300, 130), dt, seed=1), randn((300, 1), dt, seed=2))
             for dt in (torch.float32, torch.bfloat16)]
    check_cases(_row_chain, cases, grad=True)
    from torch.fx.experimental.proxy_tensor import make_fx

    from neuron_inductor import pipeline
    from neuron_inductor.config import get_config
    from neuron_inductor.graph.passes import run_passes
    from neuron_inductor.ir import TileRegion
    args = [torch.empty(s, device="meta") for s in ((256, 512), (256, 512), (256, 1))]
    gm = make_fx(lambda *a: (_row_chain(*a),), tracing_mode="fake")(*args)
    lg = pipeline.partition_and_lower(run_passes(gm), get_config().replace(target="trn1", cache=False), "rows")
    (k,) = lg.program.kernels
    acts = [s for s, _ in walk(k.body) if getattr(s, "op", None) == "activation" and s.attrs.get("op") == "copy"]
    assert any(isinstance(s.srcs.get("scale"), TileRegion) for s in acts), acts
    assert len(acts) >= 2 and not any(getattr(s, "op", None) == "tensor_scalar" for s, _ in walk(k.body))
