"""Every cache test gets a fresh cache dir, a fresh config and zeroed counters."""
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # for the shared helpers in _fake.py


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    from neuron_inductor import config
    from neuron_inductor.cache import clear_memory, reset_stats

    d = tmp_path / "cache"
    monkeypatch.setenv("NEURON_INDUCTOR_CACHE_DIR", str(d))
    for var in ("NEURON_INDUCTOR_CACHE", "NEURON_INDUCTOR_CACHE_MAX_BYTES",
                "NEURON_INDUCTOR_CACHE_LOCK_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    config.reset()
    clear_memory()
    reset_stats()
    yield d
    config.reset()
    clear_memory()
    reset_stats()
    os.environ.pop("NEURON_INDUCTOR_CACHE_DIR", None)


@pytest.fixture(scope="session")
def real(tmp_path_factory):
    """A real compiled cache (forward, backward, Dynamo plan of ``_archive.model``) and its honest
    export, made once: tests copy it, never change it."""
    from _archive import make_real

    d = tmp_path_factory.mktemp("real")
    return make_real(d / "cache", d)
