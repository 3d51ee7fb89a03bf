"""compile_cached in one process: hits, misses, faults. Counters are asserted, never timing."""
import json
import os
import warnings

import pytest
import torch
from filelock import FileLock

from _fake import compiles, graph, make_compile_fn
from neuron_inductor.cache import (CacheSecurityError, NeuronCacheWarning, Store, clear_memory,
                                   compile_cached, stats)
from neuron_inductor.stats import read_persisted
from neuron_inductor.config import get_config

X = torch.arange(4.0)


def run(count_file, x=X, cfg=None, **kw):
    fn = compile_cached(graph(), [x], "inference", cfg or get_config(), make_compile_fn(count_file, **kw))
    out = fn([x])[0]
    torch.testing.assert_close(out, x * 2)
    return out


def entries(cache_dir):
    return list(Store(cache_dir).entries())


def test_miss_then_hits_memory_and_disk(cache_dir, tmp_path):
    cnt = tmp_path / "count"
    run(cnt)
    run(cnt)
    assert compiles(cnt) == 1
    s = stats()
    assert (s["misses"], s["hits"], s["hits_memory"]) == (1, 1, 1)
    clear_memory()  # as if a new process: must come from disk
    run(cnt)
    s = stats()
    assert compiles(cnt) == 1 and s["hits_disk"] == 1 and s["compile_seconds_saved"] == 1.5
    (e,) = entries(cache_dir)
    assert e.hits == 1 and e.manifest["files"]["wrapper.py"]["sha256"]
    assert oct(os.stat(cache_dir).st_mode & 0o777) == "0o700"
    persisted = read_persisted(cache_dir)["0.1.0"]
    assert persisted["misses"] == 1 and persisted["hits"] == 1
    assert e.path.parent.parent.name == "v1" and e.path.parent.name == e.key[:2]
    assert json.loads((e.path / "record.json").read_text())["kind"] == "inference"


def test_shape_change_is_a_miss(cache_dir, tmp_path):
    cnt = tmp_path / "count"
    run(cnt)
    run(cnt, x=torch.arange(6.0))
    assert compiles(cnt) == 2 and stats()["misses"] == 2 and len(entries(cache_dir)) == 2


def test_failed_compile_is_not_stored_and_propagates(cache_dir, tmp_path):
    cnt = tmp_path / "count"
    with pytest.raises(RuntimeError, match="lowering failed"):
        run(cnt, fail=True)
    assert entries(cache_dir) == []
    run(cnt)  # the lock was released and the next attempt compiles
    assert compiles(cnt) == 2 and len(entries(cache_dir)) == 1


@pytest.mark.parametrize("damage", ["corrupt_wrapper", "truncate_kernels", "drop_manifest",
                                    "garble_manifest"])
def test_damaged_entry_is_quarantined_and_recompiled(cache_dir, tmp_path, damage):
    cnt = tmp_path / "count"
    run(cnt)
    (e,) = entries(cache_dir)
    if damage == "corrupt_wrapper":
        (e.path / "wrapper.py").write_text("def call(args):\n    return [args[0] * 3]\n")
    elif damage == "truncate_kernels":
        (e.path / "kernels.py").write_text("from neuron")
    elif damage == "drop_manifest":
        (e.path / "manifest.json").unlink()
    else:
        (e.path / "manifest.json").write_text("{not json")
    clear_memory()
    with pytest.warns(NeuronCacheWarning, match="quarantined"):
        run(cnt)  # asserts the result is x * 2, not the corrupted x * 3
    assert compiles(cnt) == 2 and stats()["quarantined"] == 1
    assert len(list((cache_dir / "quarantine").iterdir())) == 1
    (fresh,) = entries(cache_dir)
    Store(cache_dir).verify(fresh.path)


def test_unwritable_cache_dir_runs_uncached_with_one_warning(tmp_path, monkeypatch, cache_dir):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")
    monkeypatch.setenv("NEURON_INDUCTOR_CACHE_DIR", str(blocker / "cache"))
    from neuron_inductor import config
    config.reset()
    cnt = tmp_path / "count"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(cnt)
        run(cnt)
    assert len([w for w in caught if issubclass(w.category, NeuronCacheWarning)]) == 1
    assert compiles(cnt) == 2 and stats()["bypasses"] == {"unwritable": 2}


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_cache_dir_runs_uncached(cache_dir, tmp_path):
    cache_dir.mkdir(mode=0o500)
    cnt = tmp_path / "count"
    with pytest.warns(NeuronCacheWarning):
        run(cnt)
    assert stats()["bypasses"] == {"unwritable": 1}


def test_write_failure_disk_full_runs_uncached(cache_dir, tmp_path, monkeypatch):
    from neuron_inductor.cache import store

    def full(path, data, sync=False):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store, "_write_file", full)
    cnt = tmp_path / "count"
    with pytest.warns(NeuronCacheWarning, match="No space"):
        run(cnt)
    assert stats()["bypasses"] == {"write_failed": 1}
    assert entries(cache_dir) == [] and not [p for p in cache_dir.rglob(".tmp-*")]


@pytest.mark.parametrize("how", ["group_writable", "other_writable", "other_owner"])
def test_insecure_cache_dir_is_refused(cache_dir, tmp_path, how):
    run(tmp_path / "count")
    (e,) = entries(cache_dir)
    clear_memory()
    if how == "group_writable":
        os.chmod(cache_dir, 0o770)
    elif how == "other_writable":
        os.chmod(e.path.parent, 0o707)  # a dir between the root and the entry
    else:
        if os.geteuid() != 0:
            pytest.skip("needs root to chown")
        os.chown(cache_dir, 4242, -1)
    with pytest.raises(CacheSecurityError, match="chmod 700"):
        run(tmp_path / "count")


def test_cache_disabled_is_a_counted_bypass(cache_dir, tmp_path):
    cnt = tmp_path / "count"
    run(cnt, cfg=get_config().replace(cache=False))
    assert stats()["bypasses"] == {"disabled": 1} and not cache_dir.exists()


def test_lock_timeout_compiles_uncached(cache_dir, tmp_path):
    cnt = tmp_path / "count"
    run(cnt, x=torch.arange(6.0))  # creates the store; now hold the lock of another key
    store = Store(cache_dir)
    from neuron_inductor.cache import key_of, make_record
    key = key_of(make_record(graph(), [X], "inference", get_config()))
    store.ensure_parent(key)
    with FileLock(str(store.lock_path(key))):
        with pytest.warns(NeuronCacheWarning, match="timed out"):
            run(cnt, cfg=get_config().replace(cache_lock_timeout=0))
    assert stats()["bypasses"] == {"lock_timeout": 1} and compiles(cnt) == 2


def test_lru_eviction_keeps_recently_hit_entries(cache_dir, tmp_path):
    cnt = tmp_path / "count"
    run(cnt, x=torch.arange(1.0))       # A
    one = entries(cache_dir)[0].size
    cfg = get_config().replace(cache_max_bytes=int(one * 2.5))
    run(cnt, x=torch.arange(2.0), cfg=cfg)   # B
    clear_memory()
    run(cnt, x=torch.arange(1.0), cfg=cfg)   # hit A: A is now more recent than B
    a = [e for e in entries(cache_dir) if e.hits == 1][0]
    future = a.created + 1000
    os.utime(a.path / "hits", (future, future))  # make "more recent" independent of clock resolution
    run(cnt, x=torch.arange(3.0), cfg=cfg)   # C: over the cap -> evict least recently used (B)
    left = entries(cache_dir)
    assert stats()["evictions"] == 1 and len(left) == 2 and a.key in {e.key for e in left}
    assert compiles(cnt) == 3


def test_stale_temp_dirs_are_swept(cache_dir, tmp_path):
    run(tmp_path / "count")
    shard = entries(cache_dir)[0].path.parent
    dead = shard / ".tmp-abc-otherhost-1-x"
    dead.mkdir()
    old = shard / ".tmp-def-otherhost-2-y"
    old.mkdir()
    os.utime(old, (0, 0))
    import socket
    mine_dead = shard / f".tmp-ghi-{socket.gethostname().replace('-', '_')[:32]}-999999999-z"
    mine_dead.mkdir()
    clear_memory()  # a new process sweeps on first use
    run(tmp_path / "count")
    assert dead.exists()  # another host's live-looking writer is left alone
    assert not old.exists() and not mine_dead.exists()
