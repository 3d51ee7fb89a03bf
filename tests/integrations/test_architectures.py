"""Every causal-LM architecture of the matrix (benchmarks/architectures.py) compiled vs eager.

Per architecture, on a tiny random-weight model (hidden 64, 2 layers, batch 2, seq 16): forward logits,
one training step's gradients, and static-cache ``generate`` (same tokens, decode step compiled once and
reused). The llama/mistral/qwen families must compile with no fallback op at all; their MoE variants
may only fall back on data-dependent routing ops. Marked slow: CI still runs it (keep configs tiny).
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "architectures.py"


def _load():
    mod = sys.modules.get("neuron_benchmarks_architectures")
    if mod is None:
        spec = importlib.util.spec_from_file_location("neuron_benchmarks_architectures", _PATH)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    return mod


A = _load()


# the core set (~8 s each); NEURON_TEST_ALL_ARCHS=1 runs every row of the README table
_ARCHS = list(A.ARCHS) if os.environ.get("NEURON_TEST_ALL_ARCHS") else list(A.CORE)


@pytest.mark.slow
@pytest.mark.parametrize("arch", _ARCHS)
def test_architecture(arch: str) -> None:
    r = A.run_arch(arch)
    failed = {k: v for k, v in r.errors.items()}
    assert r.ok, f"{arch}: " + "\n".join(f"{k}: {v}" for k, v in failed.items())
    # an internal compiler error is caught and runs the graph eagerly: never acceptable here
    crashed = {op: n for op, n in r.fallbacks.items() if op.startswith("<whole")}
    assert not crashed, f"{arch}: the compiler failed on {crashed} (see the warning log)"
    allowed = A.allowed_fallbacks(arch)
    if allowed is not None:
        extra = {op: n for op, n in r.fallbacks.items() if op not in allowed}
        assert not extra, f"{arch} must not fall back on {extra}"
