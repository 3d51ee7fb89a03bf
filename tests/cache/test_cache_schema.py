"""Valid JSON of the wrong shape in any file the cache reads back is corruption: quarantined,
recompiled, reported once, correct result; listing and verifying never crash."""
import hashlib
import json
import warnings

import pytest
import torch

from _archive import X, populate
from _fake import compiles, graph, make_compile_fn
from neuron_inductor.cache import NeuronCacheWarning, Store, clear_memory, compile_cached, manage, stats
from neuron_inductor.stats import STATS_FILE, read_persisted
from neuron_inductor.config import get_config

SHAPES = [[], "text", 3, None, {"files": [], "input_shapes": "4", "inputs": "x"}]


def _rewrite(entry, name, obj):
    """Replace ``name`` and, for a checksummed file, its manifest line (a consistent wrong shape)."""
    data = json.dumps(obj).encode()
    (entry / name).write_bytes(data)
    if name != "manifest.json":
        man = json.loads((entry / "manifest.json").read_text())
        man["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        (entry / "manifest.json").write_text(json.dumps(man))


@pytest.mark.parametrize("name", ["manifest.json", "meta.json", "record.json"])
@pytest.mark.parametrize("shape", SHAPES, ids=["list", "str", "int", "null", "bad-fields"])
def test_wrong_shape_is_quarantined_recompiled_and_reported_once(cache_dir, tmp_path, name, shape):
    store, key = populate(cache_dir)
    _rewrite(store.entry_dir(key), name, shape)
    # list / verify / explain read it without a traceback
    rows = [manage.entry_row(e) for e in store.entries()]
    assert len(rows) == 1
    assert not manage.verify_all(store)[0]["ok"]
    manage.nearest(store, {"kind": "inference"})
    cnt = tmp_path / "count"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            clear_memory() if _ == 0 else None
            fn = compile_cached(graph(), [X], "inference", get_config(), make_compile_fn(cnt))
            assert torch.equal(fn([X])[0], X * 2)
    assert len([w for w in caught if issubclass(w.category, NeuronCacheWarning)]) == 1
    assert compiles(cnt) == 1 and stats()["quarantined"] == 1
    (fresh,) = Store(cache_dir).entries()
    Store(cache_dir).verify(fresh.path)


def test_wrong_shape_stats_file_never_fails_a_compile(cache_dir, tmp_path):
    store, key = populate(cache_dir)
    for bad in ([], {"0.1.0": []}, {"0.1.0": {"hits": "many"}}):
        (cache_dir / STATS_FILE).write_text(json.dumps(bad))
        assert all(isinstance(v, dict) for v in read_persisted(cache_dir).values())
        clear_memory()
        fn = compile_cached(graph(), [X], "inference", get_config(), make_compile_fn(tmp_path / "c"))
        assert torch.equal(fn([X])[0], X * 2)
    assert compiles(tmp_path / "c") == 0


def test_cli_list_and_verify_survive_wrong_shapes(cache_dir, tmp_path):
    import subprocess
    import sys

    store, key = populate(cache_dir)
    _rewrite(store.entry_dir(key), "meta.json", [])
    cmd = [sys.executable, "-m", "neuron_inductor.cli", "cache", "--cache-dir", str(cache_dir)]
    r = subprocess.run([*cmd, "list"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr
    r = subprocess.run([*cmd, "verify"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "malformed meta.json" in r.stdout and "Traceback" not in r.stderr
