"""Deletion never leaves the cache: no marker, look-alike names and symlinks are all left alone."""
import os

import pytest
import torch

from _archive import populate
from neuron_inductor.cache import manage
from neuron_inductor.cache.store import MARKER, NotACacheError, Store


def project(tmp_path):
    """A directory someone pointed --cache-dir at by mistake."""
    p = tmp_path / "project"
    for d in ("venv/lib", "vendor/pkg", "src", "v1/ab"):
        (p / d).mkdir(parents=True)
        (p / d / "file.txt").write_text("precious")
    os.chmod(p, 0o700)
    return p


def files_under(p):
    return sorted(str(f.relative_to(p)) for f in p.rglob("*"))


def test_not_a_cache_is_refused_and_nothing_deleted(tmp_path):
    p = project(tmp_path)
    before = files_under(p)
    for create in (False, True):  # opening it at all is refused now, not only deleting
        with pytest.raises(NotACacheError, match="not a neuron_inductor compile cache.*cache adopt"):
            Store(p, create=create)
    assert not (p / MARKER).exists()  # a directory with other content is not adopted
    assert files_under(p) == before


def test_row_5_a_folder_of_cache_look_alike_names_is_not_adopted(tmp_path, cache_dir):
    """``v1/ v2/ v3/ quarantine/`` holding a user's files: every command refuses it (read-only ones
    too), no marker is written, nothing is deleted; ``cache adopt`` claims it deliberately."""
    p = tmp_path / "mine"
    for d in ("v1", "v2", "v3", "quarantine"):
        (p / d).mkdir(parents=True)
        (p / d / "notes.txt").write_text("precious")
    os.chmod(p, 0o700)
    before = files_under(p)
    from _archive import run_cli

    for args in (["list"], ["stats"], ["verify", "--remove"], ["prune", "--old-versions"], ["clear", "--yes"]):
        r = run_cli(p, *args)
        assert r.returncode == 1 and "cache adopt" in r.stderr, (args, r.stderr)
    from _fake import graph, make_compile_fn
    from neuron_inductor.cache import compile_cached
    from neuron_inductor.config import get_config

    with pytest.raises(NotACacheError, match="cache adopt"):  # a compile refuses it too
        compile_cached(graph(), [torch.arange(4.0)], "inference",
                       get_config().replace(cache_dir=str(p)), make_compile_fn(None))
    assert files_under(p) == before and not (p / MARKER).exists()
    r = run_cli(p, "adopt")
    assert r.returncode == 0 and (p / MARKER).is_file(), r.stderr
    assert Store(p, create=False).root == p


def test_marker_is_written_only_into_a_created_or_empty_root(tmp_path):
    fresh = tmp_path / "fresh"
    Store(fresh)
    assert (fresh / MARKER).is_file()
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    Store(empty, create=False)
    assert (empty / MARKER).is_file()


def test_look_alikes_and_symlinks_inside_a_cache_survive(cache_dir, tmp_path):
    store, key = populate(cache_dir)
    data = tmp_path / "data"
    (data / "ab" / ("c" * 64)).mkdir(parents=True)
    (data / "ab" / ("c" * 64) / "keep.txt").write_text("precious")
    (data / "keep.txt").write_text("precious")
    for name in ("venv", "vendor", "v1x", "v"):
        (cache_dir / name / "sub").mkdir(parents=True)
        (cache_dir / name / "sub" / "keep.txt").write_text("precious")
    os.symlink(data, cache_dir / "v2")                         # a symlinked version dir
    shard = "cd" if key[:2] != "cd" else "ce"                   # not the real entry's shard
    os.symlink(data / "ab", cache_dir / "v1" / shard)          # a symlinked shard
    os.symlink(data / "ab" / ("c" * 64), store.entry_dir(key).parent / ("e" * 64))  # a symlinked entry
    before_data = files_under(data)

    assert [e.key for e in store.entries(all_versions=True)] == [key]
    plan = manage.plan_prune(store, old_versions=True, max_size=0)
    assert plan.other_dirs == [] and [e.key for e in plan.remove] == [key]
    manage.apply_prune(store, plan)
    manage.clear(store)
    assert files_under(data) == before_data
    for name in ("venv", "vendor", "v1x", "v"):
        assert (cache_dir / name / "sub" / "keep.txt").read_text() == "precious"
    with pytest.raises(NotACacheError):
        store.remove(cache_dir / "venv")
    with pytest.raises(NotACacheError):
        store.remove(store.entry_dir(key).parent / ("e" * 64))
    assert files_under(data) == before_data


def test_old_schema_dirs_are_pruned_but_only_real_v_dirs(cache_dir, tmp_path):
    store, key = populate(cache_dir)
    (cache_dir / "v0" / "ab").mkdir(parents=True)
    plan = manage.plan_prune(store, old_versions=True)
    assert plan.other_dirs == [cache_dir / "v0"]
    manage.apply_prune(store, plan)
    assert not (cache_dir / "v0").exists() and store.entry_dir(key).is_dir()


def test_cli_clear_and_prune_refuse_and_dry_run(tmp_path, cache_dir):
    import subprocess
    import sys

    p = project(tmp_path)
    before = files_under(p)
    cmd = [sys.executable, "-m", "neuron_inductor.cli", "cache", "--cache-dir"]
    for args in (["clear", "--yes"], ["prune", "--old-versions"], ["clear", "--dry-run"], ["list"]):
        r = subprocess.run([*cmd, str(p), *args], capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and "not a neuron_inductor compile cache" in r.stderr, r.stderr
    assert files_under(p) == before
    store, key = populate(cache_dir)
    r = subprocess.run([*cmd, str(cache_dir), "clear", "--dry-run"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and key in r.stdout and "would remove 1 entries" in r.stdout
    assert store.entry_dir(key).is_dir()
