"""``cache export`` / ``cache import``: carrying entries between machines as data, never as code.

An archive is a ``.tar.gz`` of plain ustar files named ``v<N>/<2 hex>/<64 hex>/<file>``, where
``<file>`` is one of an entry's *data* files (``manifest.json``, ``record.json``, ``meta.json``,
``program.json``), plus, when signed, ``neuron-inductor-signature.json``: the sha256 of every member
and an HMAC-SHA256 of that list under a key file both machines hold (never inside the archive).
No Python source or bytecode is ever carried. Import:

1. reads the archive with its own streaming ustar reader (``tario.py``: no pax/GNU headers, no
   quadratic parsing, bounded memory): only regular files with names of exactly that shape, each
   written with ``O_CREAT|O_EXCL|O_NOFOLLOW`` below a fresh staging dir inside the cache, under caps
   on member count, per-file and total size. Anything else (links, devices, FIFOs, absolute or
   ``..`` names, other names, Python sources, a member twice, too much data) refuses the archive;
2. checks each entry: strict, bounded schemas, checksums, the record hashing to the key, built by
   these very neuron_inductor sources; then *regenerates* its ``kernels.py`` and ``wrapper.py`` from
   ``program.json`` with this machine's code generator (``regen.py``: the program must agree with
   the key's graph signature, pass the IR verifier and the kernel checks) and refuses it unless they
   hash to what the archive's manifest claims. Entries that cannot be regenerated from data
   (Dynamo-level plans, graphs calling hand-written kernels) are refused with the reason;
3. installs only trusted archives (a valid signature, or ``trust=True`` after a dry run listed every
   key, graph name and file), as fresh local entries holding the regenerated sources and bytecode
   compiled here. A key already present keeps the local entry.

Every cache command first sweeps the staging dirs of killed imports (``store.sweep_temps``).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from . import tario, validate
from .regen import RegenError, regenerate, sha256
from .schema import SCHEMA_VERSION, canonical_json, key_of, package_fingerprint
from .store import IMPORT_PREFIX, CorruptEntry, Store, host_tag
from .validate import ARCHIVE_FILES, MANIFEST, META, PLAN, PROGRAM, RECORD, SOURCE_FILES

SIGNATURE = "neuron-inductor-signature.json"
_MEMBER = re.compile(r"^v([0-9]{1,6})/([0-9a-f]{2})/([0-9a-f]{64})/([A-Za-z0-9_.-]{1,64})$")
MIN_KEY_BYTES = 16


class ArchiveError(Exception):
    """The archive is refused as a whole; the message says which member and why."""


@dataclass(frozen=True)
class Limits:
    """Caps on what an archive may unpack to (a small archive must not fill the disk or the RAM)."""

    max_members: int = 20000
    max_file_bytes: int = 256 << 20
    max_total_bytes: int = 4 << 30


# -- signing ----------------------------------------------------------------------------------------
def read_key(path: Path | str) -> bytes:
    """The shared secret of a key file: private to its owner, at least 16 bytes."""
    p = Path(path).expanduser()
    try:
        st = os.stat(p)
        data = p.read_bytes().strip()
    except OSError as e:
        raise ArchiveError(f"cannot read signing key file {p}: {e}") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ArchiveError(f"signing key file {p} is readable or writable by others "
                           f"(mode {stat.filemode(st.st_mode)}); run `chmod 600 {p}`")
    if len(data) < MIN_KEY_BYTES:
        raise ArchiveError(f"signing key file {p} holds {len(data)} bytes; need at least {MIN_KEY_BYTES} "
                           "(make one with `neuron-inductor cache keygen FILE`)")
    return data


def make_key(path: Path | str) -> Path:
    """Write a new random key file (mode 0600); refuses to overwrite."""
    import secrets

    p = Path(path).expanduser()
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return p


def _mac(key: bytes, digests: dict[str, str]) -> str:
    return hmac.new(key, canonical_json({"format": 1, "files": digests}).encode(), hashlib.sha256).hexdigest()


# -- export -----------------------------------------------------------------------------------------
def export(store: Store, dest: Path, keys: Iterable[str] | None = None,
           sign_key: bytes | None = None) -> dict[str, list]:
    """Write the data of verified entries (and of the entries their plans name) to a ``.tar.gz``.

    Only data files travel (record, meta, program, manifest): the importer regenerates the sources
    from the program. Dynamo-level plans and entries without program data stay behind (listed under
    ``local_only``; unreadable or corrupt entries under ``skipped``). Raises :class:`ArchiveError` when nothing would be exported; no file is left
    behind on failure.
    """
    dest = Path(dest)
    if dest.is_dir():
        raise ArchiveError(f"{dest} is a directory; give a file name such as {dest}/cache.tar.gz")
    if not dest.parent.is_dir():
        raise ArchiveError(f"directory {dest.parent} does not exist")
    by_key = {e.key: e for e in store.entries()}
    wanted = set(by_key) if keys is None else set(keys)
    for k in list(wanted):  # a Dynamo-level entry: export the ATen entries it names
        plan = by_key[k].read_json(PLAN) if k in by_key else {}
        wanted.update(x for x in (plan.get("forward"), plan.get("backward")) if x)
    members: list[tuple[str, Path]] = []
    done, skipped, local = [], [], []
    for k in sorted(wanted):
        e = by_key.get(k)
        if e is None:
            skipped.append({"key": k, "problem": "not in the cache"})
            continue
        try:
            manifest = store.verify(e.path)
        except CorruptEntry as exc:
            skipped.append({"key": k, "problem": str(exc)})
            continue
        if PLAN in manifest["files"]:
            local.append({"key": k, "problem": "a Dynamo-level plan: not portable (the importing "
                                                 "machine writes its own at the first compile)"})
            continue
        if PROGRAM not in manifest["files"]:
            local.append({"key": k, "problem": f"no {PROGRAM} (a graph calling hand-written kernels, "
                                                 "or an entry of an older version): its sources cannot "
                                                 "be regenerated elsewhere"})
            continue
        arc = e.path.relative_to(store.root).as_posix()
        for name in [*manifest["files"], MANIFEST]:
            if name in ARCHIVE_FILES:
                members.append((f"{arc}/{name}", e.path / name))
        done.append(k)
    if not done:
        why = (skipped + local)[:1]
        raise ArchiveError("no entries to export" + (f" ({why[0]['key'][:12]}: {why[0]['problem']})"
                                                     if why else ""))
    files: list[tuple[str, Any]] = sorted(members)
    if sign_key is not None:
        digests = {n: _sha256_file(p) for n, p in files}
        files.append((SIGNATURE, json.dumps({"format": 1, "files": digests, "hmac": _mac(sign_key, digests)},
                                            indent=1, sort_keys=True).encode()))
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        tario.write_archive(tmp, files, int(time.time()))
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    return {"exported": done, "skipped": skipped, "local_only": local, "signed": sign_key is not None}


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# -- extraction -------------------------------------------------------------------------------------
def _open_member(root_fd: int, parts: list[str]) -> int:
    """Create ``parts`` below ``root_fd`` without following any link; returns a writable fd."""
    fd = os.dup(root_fd)
    try:
        for d in parts[:-1]:
            try:
                os.mkdir(d, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            nfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
        return os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
    finally:
        os.close(fd)


def _check_name(name: str) -> None:
    if name == SIGNATURE:
        return
    g = _MEMBER.match(name)
    if not g:
        raise ArchiveError(f"member {name!r}: not a cache entry file (expected v<N>/<2 hex>/<64 hex>/<file>; "
                           "absolute, '..' and other names are refused)")
    fname = g.group(4)
    if fname in SOURCE_FILES or validate.is_bytecode_name(fname) or fname.endswith(".py"):
        raise ArchiveError(f"member {name!r} is Python code: archives carry data only (the sources are "
                           "regenerated on import). An archive of an older neuron_inductor must be "
                           "exported again")
    if g.group(2) != g.group(3)[:2] or fname not in ARCHIVE_FILES:
        raise ArchiveError(f"member {name!r}: unknown file name or wrong shard")


def extract(src: Path, staging: Path, limits: Limits = Limits()) -> dict[str, str]:
    """Stream the allowed members of ``src`` into ``staging``: ``{name: sha256}``; refuses the whole
    archive (:class:`ArchiveError`) on anything else. Memory stays bounded by one read chunk."""
    digests: dict[str, str] = {}
    total = 0
    root_fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        with tario.open_stream(src) as stream:
            for m, chunks in tario.members(stream):
                if len(digests) >= limits.max_members:
                    raise ArchiveError(f"more than {limits.max_members} members")
                _check_name(m.name)
                if m.size > limits.max_file_bytes:
                    raise ArchiveError(f"member {m.name!r} is {m.size} bytes (limit {limits.max_file_bytes})")
                if total + m.size > limits.max_total_bytes:
                    raise ArchiveError(f"archive unpacks to more than {limits.max_total_bytes} bytes")
                try:
                    out = _open_member(root_fd, m.name.split("/"))
                except FileExistsError:
                    raise ArchiveError(f"member {m.name!r} appears twice") from None
                with os.fdopen(out, "wb") as f:
                    digests[m.name], n = tario.sha256_stream(chunks(), f.write)
                total += n
    except ArchiveError:
        raise
    except (tario.TarFormatError, EOFError, OSError, ValueError, RecursionError, MemoryError) as e:
        raise ArchiveError(f"cannot read the archive: {e}") from None
    finally:
        os.close(root_fd)
    return digests


# -- import -----------------------------------------------------------------------------------------
@dataclass
class Staged:
    """One entry of the archive after its checks: the regenerated sources when it passed."""

    key: str
    files: dict[str, bytes]
    record: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    problem: str | None = None


def _json(files: dict[str, bytes], name: str) -> Any:
    return validate.loads(files[name], name, validate.JSON_BYTES.get(name, validate.MAX_JSON_BYTES))


def _check_entry(key: str, files: dict[str, bytes]) -> Staged:
    """Schemas, checksums, the key, then regeneration; ``problem`` says why an entry is refused."""
    st = Staged(key, files)
    try:
        if MANIFEST not in files:
            raise CorruptEntry("no manifest")
        man = validate.manifest(_json(files, MANIFEST))
        if man["key"] != key:
            raise CorruptEntry("the manifest is for another key")
        listed = set(man["files"])
        extra = set(files) - listed - {MANIFEST}
        if extra:
            raise CorruptEntry(f"files not in the manifest: {sorted(extra)}")
        for name, info in man["files"].items():
            if name not in ARCHIVE_FILES:
                continue  # a source or bytecode the archive only names: regenerated, then compared
            if name not in files:
                raise CorruptEntry(f"{name} is missing")
            if hashlib.sha256(files[name]).hexdigest() != info["sha256"]:
                raise CorruptEntry(f"checksum mismatch in {name}")
        st.record = validate.record(_json(files, RECORD)) if RECORD in files else {}
        if not st.record or key_of(st.record) != key:
            raise CorruptEntry("its record does not hash to its key")
        st.meta = validate.meta(_json(files, META)) if META in files else {}
        if st.record["kind"] == "dynamo" or PLAN in listed:
            raise CorruptEntry("a Dynamo-level plan: plans are not imported (they cannot be checked "
                               "against their graph from data); this machine traces the graph once "
                               "and writes its own plan, then hits the imported kernels")
        if st.record.get("user_kernels"):
            raise CorruptEntry("the graph calls hand-written kernels, whose sources are not carried: "
                               "it compiles on this machine")
        pkg = st.record["package"]
        if pkg != package_fingerprint():
            raise CorruptEntry(f"built by other neuron_inductor sources (version {str(pkg['version'])[:20]}, "
                               f"sources {str(pkg['source_sha256'])[:12]}): this machine would never use it")
        if PROGRAM not in files:
            raise CorruptEntry(f"no {PROGRAM}: its sources cannot be regenerated from data")
        missing = [n for n in SOURCE_FILES if n not in listed]
        if missing:
            raise CorruptEntry(f"the manifest claims no hash for {missing}")
        st.sources = regenerate(files[PROGRAM], st.record, st.meta)
        for name in SOURCE_FILES:
            if sha256(st.sources[name]) != man["files"][name]["sha256"]:
                raise CorruptEntry(f"{name} regenerated from the entry's program differs from the "
                                   "archive's claim")
    except (CorruptEntry, RegenError, ValueError, RecursionError, MemoryError) as e:
        st.problem = f"{type(e).__name__}: {e}" if isinstance(e, (RecursionError, MemoryError)) else str(e)
        st.sources = {}
    return st


def _signature_status(digests: dict[str, str], sig: bytes | None, key: bytes | None) -> str:
    """``"valid"``, ``"unsigned"``, ``"no key"``; raises :class:`ArchiveError` on a bad signature."""
    if sig is None:
        return "unsigned"
    if key is None:
        return "no key"
    try:
        doc = validate.loads(sig, SIGNATURE, 64 << 20, 8)
        signed, mac = doc["files"], doc["hmac"]
        ok = isinstance(signed, dict) and isinstance(mac, str) and hmac.compare_digest(_mac(key, signed), mac)
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise ArchiveError("the signature does not match: the archive was changed after signing, or "
                           "signed with another key")
    if digests != signed:
        raise ArchiveError("the archive's members differ from its signed list: it was changed after signing")
    return "valid"


def _read_bounded(path: Path, limit: int) -> bytes:
    """The file, or :class:`CorruptEntry` if it is larger than ``limit`` (checked before reading)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise CorruptEntry(f"{path.name} is {size} bytes (limit {limit})")
        return f.read(limit + 1)


def _read_entry(staging: Path, names: list[str]) -> dict[str, bytes]:
    """One entry's staged files by file name, each within its JSON size limit."""
    files = {}
    for n in names:
        fname = n.rsplit("/", 1)[1]
        files[fname] = _read_bounded(staging / n, validate.JSON_BYTES.get(fname, validate.MAX_JSON_BYTES))
    return files


def import_(store: Store, src: Path, *, trust: bool = False, dry_run: bool = False,
            sign_key: bytes | None = None, limits: Limits = Limits()) -> dict[str, Any]:
    """Stage, check, regenerate and (when trusted and not a dry run) install the entries of ``src``.

    Returns ``{imported, already_present, bad, entries, signature, trusted, installed}``; ``entries``
    lists every key with its graph name, kind and files (what ``--dry-run`` prints). Raises
    :class:`ArchiveError` when the archive is refused as a whole (nothing is installed then).
    Entries are checked and installed one at a time: memory holds one entry, not the archive.
    """
    store.sweep_temps()
    # a private dir inside the root, named so that a sweep removes it if this process dies
    staging = Path(tempfile.mkdtemp(prefix=f"{IMPORT_PREFIX}{host_tag()}-{os.getpid()}-", dir=store.root))
    try:
        digests = extract(src, staging, limits)
        sig = None
        if SIGNATURE in digests:
            del digests[SIGNATURE]
            sig = _read_bounded(staging / SIGNATURE, 64 << 20)
        status = _signature_status(digests, sig, sign_key)
        trusted = status == "valid" or trust
        res: dict[str, Any] = {"imported": [], "already_present": [], "bad": [], "entries": [],
                               "signature": status, "trusted": trusted, "installed": False}
        grouped: dict[tuple[str, str], list[str]] = {}
        for n in digests:
            v, _shard, key, _fname = _MEMBER.match(n).groups()  # type: ignore[union-attr]
            grouped.setdefault((v, key), []).append(n)
        how = "signature" if status == "valid" else "--trust"
        for (v, key), names in sorted(grouped.items()):
            if int(v) != SCHEMA_VERSION:
                res["bad"].append({"key": key, "problem": f"written by cache schema v{v}, this is v{SCHEMA_VERSION}"})
                continue
            try:
                files = _read_entry(staging, names)
            except CorruptEntry as e:
                res["bad"].append({"key": key, "problem": str(e)})
                res["entries"].append({"key": key, "graph_name": "?", "kind": "?", "files": {},
                                       "ok": False, "problem": str(e)})
                continue
            st = _check_entry(key, files)
            if st.problem:
                res["bad"].append({"key": key, "problem": st.problem})
            res["entries"].append({"key": key, "graph_name": str(st.meta.get("graph_name", "?"))[:200],
                                   "kind": st.record.get("kind", "?"),
                                   "files": {n: len(b) for n, b in sorted(st.files.items())},
                                   "ok": st.problem is None, "problem": st.problem})
            if st.problem or dry_run or not trusted:
                continue
            if store.entry_dir(key).exists():
                res["already_present"].append(key)
                continue
            _install(store, st, src, how)
            res["imported"].append(key)
        res["installed"] = trusted and not dry_run
        return res
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _install(store: Store, st: Staged, src: Path, how: str) -> None:
    """A fresh local entry: the regenerated sources, their bytecode compiled here, the program."""
    from neuron_inductor.runtime.loader import bytecode_files

    files: dict[str, str | bytes] = {**st.sources, PROGRAM: st.files[PROGRAM]}
    files.update(bytecode_files(st.sources))
    store.write(st.key, st.record, files, st.meta,
                extra_manifest={"imported": {"archive": Path(src).name[:200], "at": time.time(),
                                             "trusted_by": how, "regenerated": True}})


__all__ = ["ArchiveError", "Limits", "SIGNATURE", "export", "extract", "import_", "make_key", "read_key"]
