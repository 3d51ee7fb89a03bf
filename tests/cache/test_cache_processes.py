"""Cross-process behaviour: a new process hits, concurrent processes compile once, a crash leaves
nothing visible. Each test starts only a few short Python processes."""
import json
import os
import subprocess
import sys
from pathlib import Path

from _fake import compiles
from neuron_inductor.cache import Store

WORKER = str(Path(__file__).with_name("_worker.py"))


def spawn(mode, count_file):
    return subprocess.Popen([sys.executable, WORKER, mode, str(count_file)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def finish(p):
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_new_process_hits_without_compiling(cache_dir, tmp_path):
    cnt = tmp_path / "count"
    first = finish(spawn("normal", cnt))
    second = finish(spawn("normal", cnt))
    assert first["stats"]["misses"] == 1 and first["out"] == [0.0, 2.0, 4.0, 6.0]
    assert second["stats"]["hits_disk"] == 1 and second["stats"]["misses"] == 0
    assert compiles(cnt) == 1  # the second process never called compile_fn


def test_four_processes_same_key_compile_once(cache_dir, tmp_path):
    cnt = tmp_path / "count"
    procs = [spawn("normal", cnt) for _ in range(4)]
    results = [finish(p) for p in procs]
    assert compiles(cnt) == 1
    assert all(r["out"] == [0.0, 2.0, 4.0, 6.0] for r in results)
    assert sum(r["stats"]["misses"] for r in results) == 1
    assert sum(r["stats"]["hits_disk"] for r in results) == 3
    assert len(list(Store(cache_dir).entries())) == 1


def test_process_killed_mid_write_leaves_no_entry(cache_dir, tmp_path):
    cnt = tmp_path / "count"
    p = spawn("die", cnt)
    p.communicate(timeout=120)
    assert p.returncode == 9 and compiles(cnt) == 1
    assert list(Store(cache_dir).entries()) == []          # nothing published
    assert list(cache_dir.rglob(".tmp-*"))                 # only the torn temp dir
    r = finish(spawn("normal", cnt))                       # next run: sweeps, compiles, correct
    assert r["out"] == [0.0, 2.0, 4.0, 6.0] and r["stats"]["misses"] == 1 and compiles(cnt) == 2
    assert not list(cache_dir.rglob(".tmp-*"))
    (e,) = Store(cache_dir).entries()
    Store(cache_dir).verify(e.path)
