"""Entries carry the compiled code of their sources, checksummed like every other file."""
import json

import torch

from _fake import graph, make_compile_fn
from neuron_inductor.cache import clear_memory, compile_cached, stats
from neuron_inductor.config import get_config
from neuron_inductor.runtime import host


def test_entry_stores_checksummed_bytecode_and_a_hit_compiles_nothing(cache_dir, monkeypatch):
    x = torch.arange(4.0)
    fn = compile_cached(graph(), [x], "inference", get_config(), make_compile_fn(None))
    assert torch.equal(fn([x])[0], x * 2)
    (entry,) = [p.parent for p in cache_dir.glob("v*/*/*/manifest.json")]
    files = json.loads((entry / "manifest.json").read_text())["files"]
    for stem in ("kernels", "wrapper"):
        assert stem + host.BYTECODE_SUFFIX in files and (entry / (stem + host.BYTECODE_SUFFIX)).is_file()
    assert not (entry / "__pycache__").exists()

    clear_memory()  # next lookup goes to disk, as a new process would

    def no_compile(*a, **k):
        raise AssertionError("a cache hit compiled generated source")
    monkeypatch.setattr(host, "compile", no_compile, raising=False)
    fn = compile_cached(graph(), [x], "inference", get_config(), make_compile_fn(None))
    assert stats()["hits_disk"] == 1 and torch.equal(fn([x])[0], x * 2)


def test_corrupted_bytecode_is_a_quarantined_miss(cache_dir):
    import warnings

    x = torch.arange(4.0)
    compile_cached(graph(), [x], "inference", get_config(), make_compile_fn(None))
    (code,) = cache_dir.glob(f"v*/*/*/wrapper{host.BYTECODE_SUFFIX}")
    data = bytearray(code.read_bytes())
    data[len(data) // 2] ^= 0xFF
    code.write_bytes(bytes(data))
    clear_memory()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        fn = compile_cached(graph(), [x], "inference", get_config(), make_compile_fn(None))
    assert stats()["quarantined"] == 1 and stats()["misses"] == 2
    assert torch.equal(fn([x])[0], x * 2)
