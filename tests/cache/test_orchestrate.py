"""The one cache orchestrator (``cache/orchestrate.py``), driven by a tier of our own: lookup ->
compile -> publish for any tier, and no tier touching the store itself."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import torch
from _fake import graph

from neuron_inductor.cache import Store, key_of, make_record, orchestrate, stats
from neuron_inductor.config import get_config

RECORD = make_record(graph(), [torch.arange(6.0)], "inference", get_config())
KEY = key_of(RECORD)


class CountingTier:
    """Entries hold one number; the callable returns it. Counts builds and loads."""

    locked, fetches = True, None

    def __init__(self, value: int, memo: bool = True, publish_later: bool = False) -> None:
        self.value, self.memo, self.publish_later = value, memo, publish_later
        self.builds = self.loads = 0
        self.pending = None

    def load(self, entry: Path, fetch: orchestrate.Fetch):
        self.loads += 1
        value = int((entry / "wrapper.py").read_text().split("=")[1])  # a damaged file raises
        return lambda: value

    def build(self, publish: orchestrate.Publish):
        self.builds += 1

        def do_publish():
            return publish({"wrapper.py": f"V = {self.value}\n"}, {"graph_name": "t"}, ())
        if self.publish_later:
            self.pending = do_publish
        else:
            assert do_publish() is not None
        return lambda: self.value

    def bypass(self, reason: str, message: str):
        self.bypassed = reason
        return lambda: -1


def serve(tier, root):
    return orchestrate.serve(tier, root, KEY, RECORD, lock_timeout=5, max_bytes=1 << 30)


def test_miss_builds_and_publishes_then_memory_then_disk(cache_dir):
    tier = CountingTier(7)
    assert serve(tier, cache_dir)() == 7 and tier.builds == 1 and tier.loads == 0
    assert Store(cache_dir).lookup(KEY) is not None
    assert serve(tier, cache_dir)() == 7 and tier.builds == 1 and stats()["hits_memory"] == 1
    orchestrate.clear_memory()
    other = CountingTier(99)  # a new process: the entry on disk wins, nothing is compiled
    assert serve(other, cache_dir)() == 7 and other.builds == 0 and other.loads == 1


def test_an_unmemoised_tier_loads_from_disk_every_time(cache_dir):
    tier = CountingTier(3, memo=False)
    serve(tier, cache_dir)
    serve(tier, cache_dir)
    serve(tier, cache_dir)
    assert tier.builds == 1 and tier.loads == 2


def test_a_deferred_publish_is_a_miss_until_it_happens(cache_dir):
    """The Dynamo tier publishes its training plan only after the backward compiles."""
    tier = CountingTier(5, memo=False, publish_later=True)
    serve(tier, cache_dir)
    assert Store(cache_dir).lookup(KEY) is None
    serve(tier, cache_dir)
    assert tier.builds == 2
    assert tier.pending() is not None and Store(cache_dir).lookup(KEY) is not None
    serve(tier, cache_dir)
    assert tier.builds == 2 and tier.loads == 1


def test_publish_requires_the_entries_it_names(cache_dir):
    published = []

    class Needy(CountingTier):
        def build(self, publish):
            published.append(publish({"wrapper.py": "V = 0\n"}, {}, ["cd" * 32]))
            return lambda: 0
    serve(Needy(0), cache_dir)
    assert published == [None] and Store(cache_dir).lookup(KEY) is None


def test_an_entry_that_fails_to_load_is_quarantined_and_rebuilt(cache_dir):
    serve(CountingTier(1), cache_dir)
    (entry, _) = Store(cache_dir).lookup(KEY)
    orchestrate.clear_memory()

    class Broken(CountingTier):
        def load(self, entry, fetch):
            raise ValueError("does not load")
    tier = Broken(2)
    with pytest.warns(orchestrate.NeuronCacheWarning, match="quarantined"):
        assert serve(tier, cache_dir)() == 2
    assert tier.builds == 1 and stats()["quarantined"] == 1
    assert len(list((cache_dir / "quarantine").iterdir())) == 1


def test_an_unusable_root_is_the_tiers_bypass(cache_dir, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    tier = CountingTier(4)
    assert serve(tier, blocker / "cache")() == -1 and tier.bypassed == "unwritable" and tier.builds == 0


def test_tiers_never_touch_the_store_themselves():
    """Locks, writes, lookups, quarantine and eviction are the orchestrator's alone."""
    import neuron_inductor.cache.api as api
    import neuron_inductor.cache.dynamo as dynamo

    forbidden = {"write", "lookup", "quarantine", "evict", "touch_hit", "FileLock", "sweep_temps"}
    for mod in (api, dynamo):
        tree = ast.parse(Path(mod.__file__).read_text())
        used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | \
               {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        assert not used & forbidden, (mod.__name__, used & forbidden)
