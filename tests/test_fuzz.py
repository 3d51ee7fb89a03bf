"""Differential fuzzing in CI: a fixed set of seeded random programs (tests/fuzz/gen.py) compiled
with backend="neuron" must match eager, forward and gradients. ``python benchmarks/fuzz.py --n 2000``
runs thousands on demand; every failure class it finds gets a named test in
tests/lowering/test_regressions_fuzz.py."""
from __future__ import annotations

import pytest

from tests.fuzz.diff import run
from tests.fuzz.gen import generate

#: small programs (<= 4 ops, <= 8K elements per value) keep the whole set near half a minute
SEEDS = range(1000, 1024)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_program_matches_eager(seed):
    p = generate(seed, max_ops=4, max_numel=1 << 13)
    out = run(p)
    assert not out.failed, f"{out.kind}: {out.detail}\n{p.source()}"


def test_generator_is_deterministic_and_covers_the_op_set():
    a = [generate(s).source() for s in range(150)]
    assert a == [generate(s).source() for s in range(150)]
    text = "\n".join(a)
    for op in ("torch.gather", "torch.index_select", "scaled_dot_product_attention", "F.linear",
               "softmax", "torch.where", "bfloat16", "transpose", "expand", "reshape", "var("):
        assert op in text, op
    assert ":2]" in text or ":3]" in text  # slices with steps
