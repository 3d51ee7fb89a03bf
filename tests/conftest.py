"""Shared test setup: every test gets a fresh compile cache dir and fresh Dynamo state."""
import os

import pytest
import torch


@pytest.fixture(autouse=True)
def _fresh_state(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURON_INDUCTOR_CACHE_DIR", str(tmp_path / "neuron-cache"))
    from neuron_inductor import config
    config.reset()
    try:
        from neuron_inductor.cache import clear_memory
        clear_memory()
    except ImportError:  # pragma: no cover
        pass
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    config.reset()
