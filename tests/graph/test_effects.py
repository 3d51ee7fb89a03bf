"""Effect-only ops (graph/effects.py): ``with_effects`` unwrapped, and kept by dead-code elimination."""
from __future__ import annotations

import pytest
import torch

from neuron_inductor import stats
from tests._compare import check


def test_linalg_inv_compiles_and_keeps_its_error_check():
    """OpInfo ``linalg.inv``: AOTAutograd wraps ``_linalg_check_errors`` in ``with_effects``,
    whose op argument the host wrapper could not render, so the whole forward ran eagerly. It is now
    a declared fallback of its own, and it still raises on a singular matrix as eager does."""
    stats.reset()
    check(torch.linalg.inv, torch.randn(5, 5) + 5 * torch.eye(5), grad=True)
    assert stats.compiled()["graph_fallbacks"] == 0
    assert stats.fallback_ops()["aten._linalg_check_errors.default"] >= 1
    torch._dynamo.reset()
    with pytest.raises(torch.linalg.LinAlgError):
        torch.compile(torch.linalg.inv, backend="neuron", options={"cache": False})(torch.zeros(3, 3))
    torch._dynamo.reset()
