"""``cache import`` against hostile archives: each is refused with a clear message, nothing is written
outside the cache, nothing in the archive is executed: entries are regenerated from data."""
import json
import os
import socket
import tarfile

import pytest

from _archive import assert_matches_eager, build, member, prefix, reseal, sign
from neuron_inductor.cache import Store
from neuron_inductor.cache.transfer import ArchiveError, Limits, import_


@pytest.fixture
def honest(real, cache_dir, tmp_path):
    """An honest archive's members, the forward key, and an empty second cache to import into."""
    return dict(real.members), real.forward, Store(tmp_path / "target")


def outside_untouched(tmp_path, target):
    """Nothing in tmp_path but the caches, the archives and the sentinel's original content."""
    assert (tmp_path / "sentinel").read_text() == "original"
    assert not (tmp_path / "pwned").exists()
    assert not list(target.root.glob(".import-*"))  # staging removed


def refused(tmp_path, target, archive, match, **kw):
    (tmp_path / "sentinel").write_text("original")
    with pytest.raises(ArchiveError, match=match):
        import_(target, archive, trust=True, **kw)
    assert list(target.entries()) == []
    outside_untouched(tmp_path, target)


def test_nested_symlink_chain_is_refused(honest, tmp_path):
    files, key, target = honest
    # the CVE-2025-4517 shape: a deep chain of links resolving outside, then a file written through it
    chain = [member(prefix(key, "a" * 20), tarfile.SYMTYPE, "."),
             member(prefix(key, "meta.json"), tarfile.SYMTYPE, "../" * 12 + str(tmp_path / "sentinel"))]
    archive = build(tmp_path / "evil.tar.gz", {prefix(key, "meta.json"): b"pwned"},
                    extra=[(m, None) for m in chain])
    refused(tmp_path, target, archive, "not a cache entry file|symlink|pax")
    archive = build(tmp_path / "evil2.tar.gz", files, extra=[(chain[1], None)])
    refused(tmp_path, target, archive, "is a symlink|pax")


@pytest.mark.parametrize("name", ["/tmp/pwned", "../pwned", "v1/../../pwned", "v1/ab/../../../pwned",
                                  "v1/zz/" + "0" * 64 + "/meta.json", "v1/00/" + "0" * 64 + "/evil.pth",
                                  "v1/00/" + "0" * 64 + "/sub/meta.json", "./v1/00/" + "0" * 64 + "/meta.json"])
def test_names_outside_the_entry_shape_are_refused(honest, tmp_path, name):
    files, key, target = honest
    archive = build(tmp_path / "evil.tar.gz", {**files, name: b"pwned"})
    refused(tmp_path, target, archive, "not a cache entry file|unknown file name")


@pytest.mark.parametrize("kind, what", [(tarfile.LNKTYPE, "a hard link"), (tarfile.CHRTYPE, "a device"),
                                        (tarfile.BLKTYPE, "a device"), (tarfile.FIFOTYPE, "a FIFO"),
                                        (tarfile.DIRTYPE, "a directory")])
def test_links_devices_and_fifos_are_refused(honest, tmp_path, kind, what):
    files, key, target = honest
    bad = member(prefix(key, "meta.json"), kind, str(tmp_path / "sentinel"))
    archive = build(tmp_path / "evil.tar.gz", files, extra=[(bad, None)])
    refused(tmp_path, target, archive, what)


def test_huge_members_and_too_many_members_are_refused(honest, tmp_path):
    files, key, target = honest
    big = {prefix(key, "meta.json"): b"#" * 5000}
    archive = build(tmp_path / "big.tar.gz", {**files, **big})
    refused(tmp_path, target, archive, r"bytes \(limit 4096\)", limits=Limits(max_file_bytes=4096))
    refused(tmp_path, target, build(tmp_path / "ok.tar.gz", files), "unpacks to more than",
            limits=Limits(max_total_bytes=sum(map(len, files.values())) - 1))
    refused(tmp_path, target, build(tmp_path / "ok2.tar.gz", files), "more than 2 members",
            limits=Limits(max_members=2))


def test_duplicate_member_is_refused(honest, tmp_path):
    files, key, target = honest
    dup = member(prefix(key, "meta.json"), tarfile.REGTYPE, size=3)
    archive = build(tmp_path / "dup.tar.gz", files, extra=[(dup, b"abc")])
    refused(tmp_path, target, archive, "appears twice")


#: row 1 (a wrapper rebinding an allowed name and calling through it), row 2 (a parameter
#: annotation that runs at import), row 3 (numpy reached through the simulator's ``nl``)
PAYLOADS = {
    "wrapper.py": ("from neuron_inductor.runtime import host\nkernels = host.os\n\n\n"
                   "def call(args):\n    kernels.system('touch {marker}')\n    return (args[0],)\n"),
    "wrapper.py ": "def call(args: open({marker!r}, 'w').write('pwned')):\n    return (args[0],)\n",
    "kernels.py": ("from neuron_inductor.runtime.nki import nki, nl, nisa\n"
                   "nl.np.f2py.os.system(nl.np.ndarray.tobytes(nl.np.array([116, 111, 117, 99, 104, 32] + "
                   "list(b'{marker}'), dtype=nl.np.uint8)))\n"),
}


@pytest.mark.parametrize("how", ["trust", "signed"])
@pytest.mark.parametrize("which", sorted(PAYLOADS))
def test_rows_1_to_3_python_in_an_archive_never_runs(real, honest, tmp_path, which, how):
    """Trusted (``--trust``) or correctly signed, an archive carrying Python is refused as a whole,
    and an archive that only *claims* a hostile source's hash regenerates the honest one and refuses
    the entry: nothing of it ever runs, the next compile equals eager."""
    files, key, target = honest
    marker = str(tmp_path / "pwned")
    src = PAYLOADS[which].format(marker=marker).encode()
    name = which.strip()
    evil = reseal({**files, prefix(key, name): src}, key)
    man = json.loads(evil[prefix(key, "manifest.json")])
    assert man["files"][name]["sha256"] == __import__("hashlib").sha256(src).hexdigest()
    sign_key = b"k" * 32
    kw = {"trust": True} if how == "trust" else {"sign_key": sign_key}
    if how == "signed":
        evil = sign(evil, sign_key)
    with pytest.raises(ArchiveError, match="is Python code: archives carry data only"):
        import_(target, build(tmp_path / "evil.tar.gz", evil), **kw)
    # without the source member, the manifest's claim alone: regenerated sources differ -> refused
    claim_only = {n: b for n, b in evil.items() if not n.endswith(".py")}
    if how == "signed":
        claim_only = sign(claim_only, sign_key)
    res = import_(target, build(tmp_path / "claim.tar.gz", claim_only), **kw)
    assert key not in res["imported"]
    assert any(b["key"] == key and "differs from the archive's claim" in b["problem"] for b in res["bad"])
    assert not os.path.exists(marker)
    assert_matches_eager(target.root)
    assert not os.path.exists(marker)


def test_real_entries_are_regenerated_and_hit(real, tmp_path, cache_dir):
    """The honest archive installs entries whose sources this machine generated; the next compile of
    the graph hits them (no ATen graph compiles) and equals eager."""
    from neuron_inductor import stats

    target = Store(tmp_path / "target")
    res = import_(target, build(tmp_path / "ok.tar.gz", real.members), trust=True)
    assert res["bad"] == [] and sorted(res["imported"]) == sorted([real.forward, real.backward])
    for k in res["imported"]:
        entry = target.entry_dir(k)
        man = json.loads((entry / "manifest.json").read_text())
        assert man["imported"]["regenerated"] is True
        assert (entry / "kernels.py").read_bytes() == (real.root / entry.relative_to(target.root)
                                                      / "kernels.py").read_bytes()
    assert_matches_eager(target.root)
    assert stats.cache()["hits_disk"] == 2 and stats.cache()["misses"] == 0


def test_row_4_plans_are_not_imported(real, tmp_path, cache_dir):
    """A plan making graph g call graph f's kernels, or claiming n_outputs=2: plans never cross
    machines (they cannot be checked from data), the graph traces and runs correctly."""
    target = Store(tmp_path / "target")
    pdir = real.root / "v1" / real.plan[:2] / real.plan
    plan = json.loads((pdir / "plan.json").read_text())
    for change in ({"forward": real.backward}, {"n_outputs": 3}):
        files = dict(real.members)
        for name in ("manifest.json", "record.json", "meta.json", "plan.json"):
            files[prefix(real.plan, name)] = (pdir / name).read_bytes()
        files = reseal(files, real.plan, plan__json=json.dumps({**plan, **change}).encode())
        res = import_(target, build(tmp_path / "plan.tar.gz", files), trust=True)
        assert [b["key"] for b in res["bad"]] == [real.plan]
        assert "plans are not imported" in res["bad"][0]["problem"]
        assert not target.entry_dir(real.plan).exists()
    assert_matches_eager(target.root)


def test_row_4_a_program_under_another_graphs_key_is_refused(real, tmp_path):
    """The forward graph's program (and its source hashes) under the backward's key: the program
    does not take the graph's inputs, so it is refused before anything is generated."""
    files = dict(real.members)
    fwd = {n.rsplit("/", 1)[1]: b for n, b in files.items() if real.forward in n}
    man = json.loads(files[prefix(real.backward, "manifest.json")])
    fman = json.loads(fwd["manifest.json"])
    for n in ("kernels.py", "wrapper.py"):
        man["files"][n] = fman["files"][n]
    files[prefix(real.backward, "manifest.json")] = json.dumps(man).encode()
    files = reseal(files, real.backward, program__json=fwd["program.json"], meta__json=fwd["meta.json"])
    res = import_(Store(tmp_path / "t"), build(tmp_path / "swap.tar.gz", files), trust=True)
    (bad,) = [b for b in res["bad"] if b["key"] == real.backward]
    assert "inputs" in bad["problem"] or "returns" in bad["problem"], bad


def test_hostile_record_is_refused(honest, tmp_path):
    files, key, target = honest
    rec = json.loads(files[prefix(key, "record.json")])
    rec["target"] = "trn9"
    res = import_(target, build(tmp_path / "evil2.tar.gz",
                                reseal(files, key, record__json=json.dumps(rec).encode())), trust=True)
    assert any("does not hash to its key" in b["problem"] for b in res["bad"])


def test_row_7_pax_and_gnu_headers_are_refused_unparsed(honest, tmp_path):
    """CVE-2024-6232: tarfile's pax parser is quadratic. Our reader refuses a pax header by its type
    flag before reading it (a long crafted one included), like GNU long names."""
    files, key, target = honest
    pax = tarfile.TarInfo(prefix(key, "meta.json"))
    pax.pax_headers = {"comment": " " * 200_000 + "0 a=" * 20_000}
    archive = build(tmp_path / "pax.tar.gz", {}, extra=[(pax, b"")], fmt=tarfile.PAX_FORMAT)
    refused(tmp_path, target, archive, "pax extended header")
    gnu = build(tmp_path / "gnu.tar.gz", {prefix(key, "m" * 60) + "x" * 60: b"x"}, fmt=tarfile.GNU_FORMAT)
    refused(tmp_path, target, gnu, "GNU long name")


def test_row_8_a_gzip_bomb_is_streamed_in_bounded_memory(honest, tmp_path):
    """100 MB of zeros (0.1 MB compressed) in one data file: refused without holding it in memory."""
    import gzip
    import io
    import tracemalloc

    files, key, target = honest
    path = tmp_path / "bomb.tar.gz"
    size = 100 << 20
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) as gz:
        with tarfile.open(fileobj=gz, mode="w|", format=tarfile.USTAR_FORMAT) as t:
            info = tarfile.TarInfo(prefix(key, "program.json"))
            info.size = size

            class Zeros(io.RawIOBase):
                left = size

                def readinto(self, b):
                    n = min(len(b), self.left)
                    b[:n] = bytes(n)
                    self.left -= n
                    return n
            t.addfile(info, Zeros())
    assert path.stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        res = import_(target, path, trust=True, limits=Limits(max_file_bytes=512 << 20))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert res["imported"] == [] and "limit" in res["bad"][0]["problem"]
    assert peak < 32 << 20, peak
    assert not list(target.root.glob(".import-*"))


def test_unsigned_archive_installs_nothing_without_trust(honest, tmp_path):
    files, key, target = honest
    archive = build(tmp_path / "a.tar.gz", files)
    res = import_(target, archive)
    assert not res["trusted"] and res["imported"] == [] and list(target.entries()) == []
    assert key in [e["key"] for e in res["entries"]]
    assert "program.json" in [e for e in res["entries"] if e["key"] == key][0]["files"]
    dry = import_(target, archive, trust=True, dry_run=True)
    assert dry["imported"] == [] and list(target.entries()) == []


def test_killed_import_staging_is_swept(honest, tmp_path):
    files, key, target = honest
    me = socket.gethostname().replace("-", "_")[:32]
    dead = target.root / f".import-{me}-999999999-abc"
    (dead / "v1").mkdir(parents=True)
    old = target.root / ".import-otherhost-1-def"
    old.mkdir()
    os.utime(old, (0, 0))
    alive = target.root / ".import-otherhost-2-ghi"
    alive.mkdir()
    assert target.sweep_temps() == 2
    assert not dead.exists() and not old.exists() and alive.exists()


def test_entries_that_cannot_be_regenerated_are_not_exported(cache_dir, tmp_path):
    """The stand-in compiler writes no program data: nothing to export, and it says why."""
    from _archive import populate
    from neuron_inductor.cache.transfer import export

    store, key = populate(cache_dir)
    with pytest.raises(ArchiveError, match="cannot be regenerated"):
        export(store, tmp_path / "x.tar.gz")
