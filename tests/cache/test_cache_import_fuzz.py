"""Property: random mutations of a real exported archive (bytes, JSON values, nesting, member names,
program fields), trusted or correctly signed, never make ``cache import`` execute anything, write
outside the cache, or raise anything but a clean refusal; what it installs is exactly what this
machine's code generator writes, and the next compile equals eager.

A few examples run in the default suite; set ``NEURON_INDUCTOR_FUZZ_EXAMPLES=500`` for a real run.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from _archive import assert_matches_eager, build, reseal, sign
from neuron_inductor.cache import Store
from neuron_inductor.cache.transfer import ArchiveError, import_

EXAMPLES = int(os.environ.get("NEURON_INDUCTOR_FUZZ_EXAMPLES", "12"))
SIGN_KEY = b"fuzz-signing-key-0123456789"

#: audit events that mean "something ran" (a process, a shell, code executed from the archive)
_RUNS = ("os.system", "subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "exec")
_events: list[tuple[str, str]] = []
_watch: list[str] = []  # the cache root writes may go to, while an import runs


def _hook(event: str, args: tuple) -> None:
    if not _watch:
        return
    if event in _RUNS:
        _events.append((event, repr(args)[:200]))
    elif event == "open" and len(args) >= 3 and isinstance(args[0], (str, bytes, os.PathLike)):
        mode, flags = args[1], args[2] if isinstance(args[2], int) else 0
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
            (flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC))
        path = os.fsdecode(args[0])
        # relative names are the importer's own ``dir_fd``-relative writes below its staging dir
        if writing and os.path.isabs(path) and not path.startswith(_watch[0]) and not path.startswith("/dev/"):
            _events.append(("write outside the cache", path))


sys.addaudithook(_hook)

INTERESTING_NAMES = ["../pwned", "/tmp/pwned", "v1/00/" + "0" * 64 + "/wrapper.py", "v1/ab/x/meta.json",
                     "neuron-inductor-signature.json", "v1/zz/" + "a" * 64 + "/meta.json", "v1//meta.json",
                     "v1/00/" + "0" * 64 + "/kernels.cpython-311.code", "x" * 300]
HOSTILE_STRINGS = ["x = __import__('os')", "a\nimport os", 'a"""; import os; """', "aten.from_file.default",
                   "os.system", "nl.np", "$ref", "$node", "__class__", "Program", "\x00", "é" * 3]
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                      st.text(max_size=20), st.sampled_from(HOSTILE_STRINGS))
json_value = st.recursive(json_leaf, lambda c: st.one_of(st.lists(c, max_size=4),
                                                         st.dictionaries(st.text(max_size=8), c, max_size=4)),
                          max_leaves=12)

mutation = st.one_of(
    st.tuples(st.just("bytes"), st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("json"), st.integers(0, 10**6), st.integers(0, 10**6), json_value),
    st.tuples(st.just("deep"), st.integers(0, 10**6), st.integers(0, 10**6), st.integers(50, 200_000)),
    st.tuples(st.just("rename"), st.integers(0, 10**6), st.sampled_from(INTERESTING_NAMES) | st.text(max_size=40)),
    st.tuples(st.just("program"), st.integers(0, 10**6), st.integers(0, 10**6), json_value),
    st.tuples(st.just("drop"), st.integers(0, 10**6)),
)


def _slots(doc):
    """Every (container, key) of a parsed JSON document, iteratively."""
    out, stack = [], [doc]
    while stack:
        c = stack.pop()
        items = c.items() if isinstance(c, dict) else enumerate(c) if isinstance(c, list) else ()
        for k, v in items:
            out.append((c, k))
            stack.append(v)
    return out


def _mutate(files: dict[str, bytes], m: tuple) -> dict[str, bytes]:
    files = dict(files)
    names = sorted(files)
    kind = m[0]
    if kind == "program":
        names = [n for n in names if n.endswith("program.json")]
    name = names[m[1] % len(names)]
    if kind == "bytes":
        data = bytearray(files[name])
        data[m[2] % len(data)] = m[3]
        files[name] = bytes(data)
    elif kind == "rename":
        files[m[2]] = files.pop(name)
    elif kind == "drop":
        del files[name]
    elif name.endswith(".json"):
        try:
            doc = json.loads(files[name])
        except (ValueError, RecursionError):  # an earlier mutation broke it already
            return files
        slots = _slots(doc)
        if slots:
            c, k = slots[m[2] % len(slots)]
            c[k] = "__DEEP__" if kind == "deep" else m[3]
            text = json.dumps(doc)
            if kind == "deep":
                text = text.replace('"__DEEP__"', "[" * m[3] + "]" * m[3], 1)
            files[name] = text.encode()
    return files


def _tree(root: Path, skip: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == skip or skip in Path(dirpath).parents:
            continue
        out += [os.path.join(dirpath, f) for f in filenames]
    return sorted(out)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 20, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(muts=st.lists(mutation, min_size=1, max_size=3), resealed=st.booleans(),
       how=st.sampled_from(["trust", "signed", "signed-before"]))
def test_mutated_archives_never_run_or_escape(real, muts, resealed, how):
    files = dict(real.members)
    for m in muts:
        files = _mutate(files, m)
        if resealed:  # an attacker recomputing the archive's own checksums after the change
            for key in {n.split("/")[2] for n in files if n.count("/") == 3 and len(n.split("/")[2]) == 64}:
                try:
                    files = reseal(files, key)
                except (KeyError, ValueError, TypeError, AttributeError, RecursionError):
                    pass
    if how == "signed":
        files = sign(files, SIGN_KEY)
    elif how == "signed-before":
        files = sign(dict(real.members), SIGN_KEY) | files
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "sentinel").write_text("original")
        try:
            archive = build(tmp / "a.tar.gz", files)
        except (ValueError, UnicodeError):  # a name tarfile itself cannot write
            return
        target = Store(tmp / "target")
        before = _tree(tmp, target.root)
        _events.clear()
        _watch[:] = [str(target.root) + os.sep]
        try:
            kw = {"trust": True} if how == "trust" else {"sign_key": SIGN_KEY}
            res = import_(target, archive, **kw)
        except ArchiveError:
            res = {"imported": [], "bad": ["archive"]}
        finally:
            _watch.clear()
        event(f"installed {len(res['imported'])}, refused {len(res['bad'])}")
        assert _events == [], _events
        assert _tree(tmp, target.root) == before and (tmp / "sentinel").read_text() == "original"
        assert not list(target.root.glob(".import-*"))
        for key in res["imported"]:  # installed: exactly the sources this machine generates
            entry = target.entry_dir(key)
            rel = entry.relative_to(target.root)
            for src in ("kernels.py", "wrapper.py"):
                want = (real.root / rel / src).read_bytes()
                assert (entry / src).read_bytes() == want, (key, src)
        if res["imported"]:
            assert_matches_eager(target.root)
