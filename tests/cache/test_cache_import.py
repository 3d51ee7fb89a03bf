"""``cache import`` against hostile archives: each is refused with a clear message, nothing is written
outside the cache, nothing in the archive is executed."""
import hashlib
import json
import os
import socket
import tarfile

import pytest
import torch

from _archive import X, build, member, members_of, populate
from _fake import compiles, graph, make_compile_fn
from neuron_inductor.cache import Store, clear_memory, compile_cached
from neuron_inductor.cache.transfer import ArchiveError, Limits, import_
from neuron_inductor.config import get_config
from neuron_inductor.runtime import host


@pytest.fixture
def honest(cache_dir, tmp_path):
    """An honest archive's members, and an empty second cache to import into."""
    store, key = populate(cache_dir)
    target = Store(tmp_path / "target")
    return members_of(store, tmp_path), key, target


def outside_untouched(tmp_path, target):
    """Nothing in tmp_path but the caches, the archives and the sentinel's original content."""
    assert (tmp_path / "sentinel").read_text() == "original"
    assert not (tmp_path / "pwned").exists()
    assert not list(target.root.glob(".import-*"))  # staging removed


def refused(tmp_path, target, archive, match):
    (tmp_path / "sentinel").write_text("original")
    with pytest.raises(ArchiveError, match=match):
        import_(target, archive, trust=True)
    assert list(target.entries()) == []
    outside_untouched(tmp_path, target)


def prefix(key, name):
    return f"v1/{key[:2]}/{key}/{name}"


def test_nested_symlink_chain_is_refused(honest, tmp_path):
    files, key, target = honest
    # the CVE-2025-4517 shape: a deep chain of links resolving outside, then a file written through it
    chain = [member(prefix(key, "a" * 20), tarfile.SYMTYPE, "."),
             member(prefix(key, "kernels.py"), tarfile.SYMTYPE, "../" * 12 + str(tmp_path / "sentinel"))]
    archive = build(tmp_path / "evil.tar.gz", {prefix(key, "kernels.py"): b"pwned"},
                    extra=[(m, None) for m in chain])
    refused(tmp_path, target, archive, "not a cache entry file|symlink")
    archive = build(tmp_path / "evil2.tar.gz", files, extra=[(chain[1], None)])
    refused(tmp_path, target, archive, "is a symlink")


@pytest.mark.parametrize("name", ["/tmp/pwned", "../pwned", "v1/../../pwned", "v1/ab/../../../pwned",
                                  "v1/zz/" + "0" * 64 + "/wrapper.py", "v1/00/" + "0" * 64 + "/evil.pth",
                                  "v1/00/" + "0" * 64 + "/sub/wrapper.py", "./v1/00/" + "0" * 64 + "/meta.json"])
def test_names_outside_the_entry_shape_are_refused(honest, tmp_path, name):
    files, key, target = honest
    archive = build(tmp_path / "evil.tar.gz", {**files, name: b"pwned"})
    refused(tmp_path, target, archive, "not a cache entry file|unknown file name")


@pytest.mark.parametrize("kind, what", [(tarfile.LNKTYPE, "a hard link"), (tarfile.CHRTYPE, "a device"),
                                        (tarfile.BLKTYPE, "a device"), (tarfile.FIFOTYPE, "a FIFO"),
                                        (tarfile.DIRTYPE, "a directory")])
def test_links_devices_and_fifos_are_refused(honest, tmp_path, kind, what):
    files, key, target = honest
    bad = member(prefix(key, "wrapper.py"), kind, str(tmp_path / "sentinel"))
    archive = build(tmp_path / "evil.tar.gz", files, extra=[(bad, None)])
    refused(tmp_path, target, archive, what)


def test_huge_members_and_too_many_members_are_refused(honest, tmp_path):
    files, key, target = honest
    big = {prefix(key, "kernels.py"): b"#" * 5000}
    archive = build(tmp_path / "big.tar.gz", {**files, **big})
    (tmp_path / "sentinel").write_text("original")
    with pytest.raises(ArchiveError, match="5000 bytes"):
        import_(target, archive, trust=True, limits=Limits(max_file_bytes=4096))
    with pytest.raises(ArchiveError, match="unpacks to more than"):
        import_(target, build(tmp_path / "ok.tar.gz", files), trust=True,
                limits=Limits(max_total_bytes=sum(map(len, files.values())) - 1))
    with pytest.raises(ArchiveError, match="more than 2 members"):
        import_(target, build(tmp_path / "ok2.tar.gz", files), trust=True, limits=Limits(max_members=2))
    assert list(target.entries()) == []
    outside_untouched(tmp_path, target)


def test_duplicate_member_is_refused(honest, tmp_path):
    files, key, target = honest
    dup = member(prefix(key, "wrapper.py"), tarfile.REGTYPE, size=3)
    archive = build(tmp_path / "dup.tar.gz", files, extra=[(dup, b"abc")])
    refused(tmp_path, target, archive, "appears twice")


def _reseal(files, key, **replace):
    """What an attacker can do: change entry files and recompute the archive's own manifest."""
    files = dict(files)
    for name, data in replace.items():
        files[prefix(key, name.replace("__", "."))] = data
    man = json.loads(files[prefix(key, "manifest.json")])
    for name in man["files"]:
        p = prefix(key, name)
        if p in files:
            man["files"][name] = {"sha256": hashlib.sha256(files[p]).hexdigest(), "size": len(files[p])}
    files[prefix(key, "manifest.json")] = json.dumps(man).encode()
    return files


HOSTILE = ("import os\nopen({marker!r}, 'w').write('pwned')\n\n\ndef call(args):\n"
           "    return [args[0] * 2]\n")


def test_hostile_entry_under_a_real_key_is_refused_even_with_trust(honest, tmp_path, cache_dir):
    files, key, target = honest
    marker = str(tmp_path / "pwned")
    evil = _reseal(files, key, wrapper__py=HOSTILE.format(marker=marker).encode())
    (tmp_path / "sentinel").write_text("original")
    res = import_(target, build(tmp_path / "evil.tar.gz", evil), trust=True)
    assert res["imported"] == [] and "import not allowed" in res["bad"][0]["problem"]
    # and a record that is not the key's: refused before anything else
    rec = json.loads(files[prefix(key, "record.json")])
    rec["target"] = "trn9"
    res = import_(target, build(tmp_path / "evil2.tar.gz",
                                _reseal(files, key, record__json=json.dumps(rec).encode())), trust=True)
    assert "does not hash to its key" in res["bad"][0]["problem"]
    # the graph compiles for real next time: nothing of the archive ran
    clear_memory()
    cnt = tmp_path / "count"
    fn = compile_cached(graph(), [X], "inference", get_config().replace(cache_dir=str(target.root)),
                        make_compile_fn(cnt))
    assert torch.equal(fn([X])[0], X * 2) and compiles(cnt) == 1
    outside_untouched(tmp_path, target)


@pytest.mark.parametrize("call", ["getattr(torch, 'load')(args[0])", "torch.load(args[0])",
                                  "args[0].__class__.__subclasses__()", "__import__('os').system('x')",
                                  "kernels.__builtins__['open']('x')", "[x for x in args]"])
def test_wrapper_audit_refuses_escapes(call):
    from neuron_inductor.cache.audit import AuditError, audit_wrapper

    audit_wrapper("import torch\n\n\ndef call(args):\n    return (args[0],)\n")
    with pytest.raises(AuditError):
        audit_wrapper(f"import torch\n\n\ndef call(args):\n    return ({call},)\n")


def test_imported_bytecode_is_dropped_and_rebuilt_from_source(honest, tmp_path):
    files, key, target = honest
    marker = str(tmp_path / "pwned")
    src = files[prefix(key, "wrapper.py")]
    # bytecode that claims to be the wrapper's (right magic, right source hash) but runs other code
    code = compile(HOSTILE.format(marker=marker), "wrapper.py", "exec")
    import importlib.util
    import marshal
    fake = importlib.util.MAGIC_NUMBER + hashlib.sha256(src).digest() + marshal.dumps(code)
    name = "wrapper" + host.BYTECODE_SUFFIX
    man = json.loads(files[prefix(key, "manifest.json")])
    man["files"][name] = {"sha256": hashlib.sha256(fake).hexdigest(), "size": len(fake)}
    evil = {**files, prefix(key, name): fake, prefix(key, "manifest.json"): json.dumps(man).encode()}
    res = import_(target, build(tmp_path / "code.tar.gz", evil), trust=True)
    assert res["imported"] == [key]
    installed = target.entry_dir(key) / name
    assert installed.read_bytes() == host.bytecode_for(src.decode(), "wrapper.py") != fake
    clear_memory()
    cnt = tmp_path / "count"
    fn = compile_cached(graph(), [X], "inference", get_config().replace(cache_dir=str(target.root)),
                        make_compile_fn(cnt))
    assert torch.equal(fn([X])[0], X * 2) and compiles(cnt) == 0 and not os.path.exists(marker)


def test_bytecode_that_differs_from_its_source_is_never_run(tmp_path):
    (tmp_path / "m.py").write_text("VALUE = 1\n")
    other = host.bytecode_for("VALUE = 666\n", "m.py")  # another source's code: hash does not match
    (tmp_path / ("m" + host.BYTECODE_SUFFIX)).write_bytes(other)
    assert host.load_file(str(tmp_path / "m.py")).VALUE == 1


def test_unsigned_archive_installs_nothing_without_trust(honest, tmp_path):
    files, key, target = honest
    archive = build(tmp_path / "a.tar.gz", files)
    res = import_(target, archive)
    assert not res["trusted"] and res["imported"] == [] and list(target.entries()) == []
    assert [e["key"] for e in res["entries"]] == [key] and "wrapper.py" in res["entries"][0]["files"]
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


def test_real_compiled_entries_pass_the_audit_and_roundtrip(cache_dir, tmp_path):
    """Entries of a real training compile (with a declared fallback and a Dynamo-level plan) import."""
    from neuron_inductor.cache.transfer import export

    def g(x, w):
        h = torch.relu(x @ w)
        return h.sum(), h.argmax(-1)  # argmax runs as a declared host fallback

    torch._dynamo.reset()
    x, w = torch.randn(4, 8), torch.randn(8, 16, requires_grad=True)
    torch.compile(g, backend="neuron")(x, w)[0].backward()
    store = Store(cache_dir)
    keys = sorted(e.key for e in store.entries())
    assert len(keys) == 3  # forward, backward, plan
    export(store, tmp_path / "real.tar.gz")
    target = Store(tmp_path / "target")
    res = import_(target, tmp_path / "real.tar.gz", trust=True)
    assert res["bad"] == [] and sorted(res["imported"]) == keys
