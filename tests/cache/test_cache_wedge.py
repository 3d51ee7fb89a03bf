"""No input wedges the cache (issue rows 6, 9-12): deep JSON, killed imports, planted links, an
unusable runtime and nonsense counters are corruption or configuration, never a stuck cache."""
import json
import os
import socket
import warnings

import pytest
import torch

from _archive import X, populate, run_cli as cli
from _fake import compiles, graph, make_compile_fn
from neuron_inductor.cache import NeuronCacheWarning, Store, clear_memory, compile_cached, stats
from neuron_inductor.stats import STATS_FILE
from neuron_inductor.config import get_config

DEEP = ("[" * 100_000 + "]" * 100_000).encode()


@pytest.mark.parametrize("name", ["manifest.json", "meta.json", "record.json"])
def test_row_6_deeply_nested_json_is_corruption(cache_dir, tmp_path, name):
    """100k levels of valid JSON: quarantined, warned once, recompiled; the CLI repairs it."""
    store, key = populate(cache_dir)
    entry = store.entry_dir(key)
    (entry / name).write_bytes(DEEP)
    if name != "manifest.json":  # a consistent manifest: the shape check, not the checksum, fires
        import hashlib
        man = json.loads((entry / "manifest.json").read_text())
        man["files"][name] = {"sha256": hashlib.sha256(DEEP).hexdigest(), "size": len(DEEP)}
        (entry / "manifest.json").write_text(json.dumps(man))
    for args in (["list"], ["verify"], ["stats"]):
        r = cli(cache_dir, *args)
        assert "Traceback" not in r.stderr and r.returncode in (0, 1), (args, r.stderr)
    cnt = tmp_path / "count"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            clear_memory()
            fn = compile_cached(graph(), [X], "inference", get_config(), make_compile_fn(cnt))
            assert torch.equal(fn([X])[0], X * 2)
    assert len([w for w in caught if issubclass(w.category, NeuronCacheWarning)]) == 1
    assert compiles(cnt) == 1 and stats()["quarantined"] == 1


def test_row_6_cli_repairs_a_wedged_entry(cache_dir):
    store, key = populate(cache_dir)
    (store.entry_dir(key) / "manifest.json").write_bytes(DEEP)
    r = cli(cache_dir, "verify", "--remove")
    assert r.returncode == 1 and "(removed)" in r.stdout and "Traceback" not in r.stderr
    assert list(Store(cache_dir).entries()) == []
    populate(cache_dir)
    (cache_dir / STATS_FILE).write_bytes(DEEP)
    r = cli(cache_dir, "clear", "--yes")
    assert r.returncode == 0 and "removed 1 entries" in r.stdout, r.stderr
    clear_memory()
    fn = compile_cached(graph(), [X], "inference", get_config(), make_compile_fn(None))
    assert torch.equal(fn([X])[0], X * 2)


def test_row_9_every_command_sweeps_a_killed_import(cache_dir):
    populate(cache_dir)
    me = socket.gethostname().replace("-", "_")[:32]
    for args in (["list"], ["stats"]):
        dead = cache_dir / f".import-{me}-999999999-abc"
        (dead / "v1").mkdir(parents=True)
        (dead / "v1" / "big").write_bytes(b"x" * 1000)
        assert cli(cache_dir, *args).returncode == 0
        assert not dead.exists(), args


def test_row_10_hits_never_follow_a_planted_symlink(cache_dir, tmp_path):
    store, key = populate(cache_dir)
    victim = tmp_path / "victim"
    victim.write_text("original")
    hits = store.entry_dir(key) / "hits"
    hits.unlink(missing_ok=True)
    os.symlink(victim, hits)
    clear_memory()
    fn = compile_cached(graph(), [X], "inference", get_config(), make_compile_fn(None))
    assert torch.equal(fn([X])[0], X * 2)
    assert victim.read_text() == "original"
    (info,) = store.entries()
    assert info.hits == 0  # a link is not a hit counter


def test_row_11_an_unusable_runtime_never_quarantines(real, tmp_path, monkeypatch):
    """``runtime='device'`` without the toolchain: loading fails for the process, not the entry."""
    from neuron_inductor import config
    from neuron_inductor.cache import api
    from neuron_inductor.runtime import nki

    store = real.store_copy(tmp_path / "c")
    monkeypatch.setenv("NEURON_INDUCTOR_RUNTIME", "device")
    config.reset()
    if nki.explain()["mode"] != "unavailable":
        pytest.skip("a Neuron toolchain and device are present")
    clear_memory()
    with pytest.raises(Exception):
        api._try_load(store, real.forward)
    assert store.entry_dir(real.forward).is_dir() and not (store.root / "quarantine").exists()
    monkeypatch.delenv("NEURON_INDUCTOR_RUNTIME")
    config.reset()


def test_row_12_stats_are_validated(cache_dir):
    populate(cache_dir)
    (cache_dir / STATS_FILE).write_text('{"0.1.0": {"hits": Infinity, "misses": -5, "x": [], '
                                        '"evictions": NaN, "dynamo_hits": 3}}')
    r = cli(cache_dir, "stats")
    assert r.returncode == 0, r.stderr
    shown = r.stdout.replace(str(cache_dir), "<dir>")  # the path may hold "-5" (pytest-50) or "inf"
    assert "inf" not in shown and "-5" not in shown and "nan" not in shown.lower()
    data = json.loads(cli(cache_dir, "stats", "--json").stdout)
    assert data["hits"] == 0 and data["misses"] == 0 and data["counters"] == {"dynamo_hits": 3}
