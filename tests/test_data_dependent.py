"""The one warning for recompiles caused by Python numbers read from tensor data (jetmoe's
``expert_size.tolist()`` splitting tokens among experts)."""
from __future__ import annotations

import warnings

import torch

from neuron_inductor import data_dependent


def _split_by_counts(x: torch.Tensor) -> list[torch.Tensor]:
    """Split rows by data-dependent counts, as jetmoe's experts do: a new count is a new graph."""
    sizes = (x > 0).sum(0).tolist()
    return [p * 2 for p in x.t().flatten().split(sizes + [x.numel() - sum(sizes)])]


def _run(fn, inputs) -> list[str]:
    torch._dynamo.reset()
    data_dependent.reset()
    compiled = torch.compile(fn, backend="neuron", dynamic=False, options={"cache": False})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for x in inputs:
            x = x if isinstance(x, tuple) else (x,)
            torch.testing.assert_close(compiled(*x), fn(*x))
    torch._dynamo.reset()
    return [str(w.message) for w in seen if "neuron_inductor: a frame" in str(w.message)]


def test_data_dependent_recompiles_warn_once_with_cause_and_fix() -> None:
    inputs = [torch.tensor([[1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]]),   # counts 1, 0
              torch.tensor([[1.0, 1.0], [-1.0, 1.0], [-1.0, -1.0]]),     # 1, 2
              torch.tensor([[1.0, 1.0], [1.0, 1.0], [-1.0, -1.0]]),      # 2, 2
              torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, -1.0]])]       # 3, 2
    msgs = _run(_split_by_counts, inputs)
    assert len(msgs) == 1, msgs
    assert "3rd time" in msgs[0] and ".tolist()" in msgs[0] and "== " in msgs[0]
    assert "recompile_limit" in msgs[0] and "batched_mm" in msgs[0]


def test_shape_and_int_argument_recompiles_do_not_warn() -> None:
    """New input shapes (static compiles per shape) and a caller's changing Python int are not
    numbers read from tensor data, even after a data-dependent graph break in the same process."""
    _split_by_counts(torch.ones(2, 2))
    torch.compile(_split_by_counts, backend="eager")(torch.ones(2, 2))  # a data-dependent break
    assert data_dependent._data_dependent_break() is not None
    assert _run(lambda x: x * 2, [torch.ones(n, 3) for n in (1, 2, 3, 4)]) == []
    assert _run(lambda x, n: x * n, [(torch.ones(3), n) for n in (1, 2, 3, 4)]) == []
