"""A compile whose kernels break a documented NKI rule is refused: the graph runs eagerly (the
declared fallback) and nothing is cached, so the next compile tries again."""
from __future__ import annotations

import pytest
import torch

from neuron_inductor import stats
from neuron_inductor import config
from neuron_inductor.codegen import conform

pytestmark = pytest.mark.nonconforming


def test_non_conforming_kernels_fall_back_and_are_not_cached(monkeypatch):
    seen = []

    def findings(src, target=None, tree=None):
        seen.append(src)
        return [conform.LintFinding("k0", 1, "alu-op-table", "forced by the test")]

    monkeypatch.setattr(conform, "conformance_findings", findings)
    stats.reset("compile", "fallback_ops")
    x = torch.randn(40, 24)
    with config.patch(fallback="warn"):
        for _ in range(2):
            torch._dynamo.reset()
            out = torch.compile(lambda a: a * 2.0 + 1.0, backend="neuron")(x)
            torch.testing.assert_close(out, x * 2.0 + 1.0)
    assert len(seen) == 2  # built twice: the refused artifact was never cached
    assert stats.compiled()["graph_fallbacks"] == 2
    assert "PLATFORM_TARGET = " in seen[0]


def test_with_fallback_error_the_finding_is_raised(monkeypatch):
    monkeypatch.setattr(conform, "conformance_findings",
                        lambda src, target=None, tree=None: [conform.LintFinding("k0", 1, "alu-op-table", "forced")])
    with config.patch(fallback="error"), pytest.raises(Exception, match="alu-op-table"):
        torch.compile(lambda a: a + 1.0, backend="neuron")(torch.randn(8, 8))
