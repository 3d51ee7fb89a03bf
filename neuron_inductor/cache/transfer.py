"""``cache export`` / ``cache import``: carrying entries between machines without trusting the archive.

An archive is a ``.tar.gz`` of entry files named ``v<N>/<2 hex>/<64 hex>/<file>``, plus, when signed,
``neuron-inductor-signature.json``: the sha256 of every member and an HMAC-SHA256 of that list under a
key file both machines hold (never inside the archive). Import:

1. unpacks with its own reader, never ``extractall``: only regular files with names of exactly that
   shape, each written with ``O_CREAT|O_EXCL|O_NOFOLLOW`` below a fresh staging dir inside the cache,
   under caps on member count, per-file and total size. Anything else (links, devices, FIFOs,
   absolute or ``..`` names, other names, a member twice, too much data) refuses the whole archive;
2. checks each entry: strict schemas, checksums, the record hashing to the key, and the static audit
   of its sources (``audit.py``);
3. installs only trusted archives (a valid signature, or ``trust=True`` after a dry run listed every
   key, graph name and file), as fresh local entries: imported bytecode is dropped and rebuilt here
   from the sources, so what runs is the source ``cache show`` prints. A key already present keeps
   the local entry.
"""
from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from . import validate
from .audit import AuditError, audit_sources
from .schema import SCHEMA_VERSION, canonical_json, key_of
from .store import IMPORT_PREFIX, CorruptEntry, Store, host_tag
from .validate import MANIFEST, META, PLAN, RECORD

SIGNATURE = "neuron-inductor-signature.json"
_MEMBER = re.compile(r"^v([0-9]+)/([0-9a-f]{2})/([0-9a-f]{64})/([A-Za-z0-9_.-]+)$")
MIN_KEY_BYTES = 16


class ArchiveError(Exception):
    """The archive is refused as a whole; the message says which member and why."""


@dataclass(frozen=True)
class Limits:
    """Caps on what an archive may unpack to (a small archive must not fill the disk)."""

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
    """Write verified entries (and the entries their plans name) to a ``.tar.gz``.

    Bytecode and usage files stay behind: the importer rebuilds the former, the latter is per machine.
    Raises :class:`ArchiveError` when nothing would be exported; no file is left behind on failure.
    """
    dest = Path(dest)
    if dest.is_dir():
        raise ArchiveError(f"{dest} is a directory; give a file name such as {dest}/cache.tar.gz")
    if not dest.parent.is_dir():
        raise ArchiveError(f"directory {dest.parent} does not exist")
    by_key = {e.key: e for e in store.entries()}
    wanted = set(by_key) if keys is None else set(keys)
    for k in list(wanted):  # a Dynamo-level entry is useless without the entries it names
        plan = by_key[k].read_json(PLAN) if k in by_key else {}
        wanted.update(x for x in (plan.get("forward"), plan.get("backward")) if x)
    members: dict[str, bytes] = {}
    done, skipped = [], []
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
        arc = e.path.relative_to(store.root).as_posix()
        for name in [*manifest["files"], MANIFEST]:
            if not validate.is_bytecode_name(name):
                members[f"{arc}/{name}"] = (e.path / name).read_bytes()
        done.append(k)
    if not done:
        raise ArchiveError("no entries to export" + (f" ({skipped[0]['key'][:12]}: {skipped[0]['problem']})"
                                                     if skipped else ""))
    if sign_key is not None:
        digests = {n: hashlib.sha256(b).hexdigest() for n, b in members.items()}
        members[SIGNATURE] = json.dumps({"format": 1, "files": digests, "hmac": _mac(sign_key, digests)},
                                        indent=1, sort_keys=True).encode()
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            for name in sorted(members):
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(members[name]), 0o600, int(time.time())
                tar.addfile(info, io.BytesIO(members[name]))
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    return {"exported": done, "skipped": skipped, "signed": sign_key is not None}


# -- extraction -------------------------------------------------------------------------------------
def _write_member(root_fd: int, parts: list[str], data_iter: Iterable[bytes]) -> int:
    """Create ``parts`` below ``root_fd`` without following any link; returns bytes written."""
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
        out = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
    finally:
        os.close(fd)
    n = 0
    with os.fdopen(out, "wb") as f:
        for chunk in data_iter:
            f.write(chunk)
            n += len(chunk)
    return n


def extract(src: Path, staging: Path, limits: Limits = Limits()) -> list[str]:
    """Unpack the allowed members of ``src`` into ``staging``; :class:`ArchiveError` on anything else."""
    names: list[str] = []
    total = 0
    root_fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        with tarfile.open(src, "r:*") as tar:
            while True:
                m = tar.next()
                if m is None:
                    break
                if len(names) >= limits.max_members:
                    raise ArchiveError(f"more than {limits.max_members} members")
                name = m.name
                if name != SIGNATURE and not _MEMBER.match(name):
                    raise ArchiveError(f"member {name!r}: not a cache entry file (expected "
                                       "v<N>/<2 hex>/<64 hex>/<file>; absolute, '..' and other names "
                                       "are refused)")
                if m.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
                    kind = ("a symlink" if m.issym() else "a hard link" if m.islnk() else
                            "a FIFO" if m.isfifo() else "a device file" if m.isdev() else "a directory" if m.isdir() else
                            f"type {m.type!r}")
                    raise ArchiveError(f"member {name!r} is {kind}; only regular files are accepted")
                g = _MEMBER.match(name)
                if g and (g.group(2) != g.group(3)[:2] or not validate.is_entry_file(g.group(4))):
                    raise ArchiveError(f"member {name!r}: unknown file name or wrong shard")
                if m.size > limits.max_file_bytes:
                    raise ArchiveError(f"member {name!r} is {m.size} bytes (limit {limits.max_file_bytes})")
                if total + m.size > limits.max_total_bytes:
                    raise ArchiveError(f"archive unpacks to more than {limits.max_total_bytes} bytes")
                f = tar.extractfile(m)
                if f is None:
                    raise ArchiveError(f"member {name!r} has no data")
                cap = min(limits.max_file_bytes, limits.max_total_bytes - total)

                def chunks(f: Any = f, cap: int = cap, name: str = name) -> Iterable[bytes]:
                    got = 0
                    while True:
                        chunk = f.read(1 << 20)
                        if not chunk:
                            return
                        got += len(chunk)
                        if got > cap:
                            raise ArchiveError(f"member {name!r} is larger than declared")
                        yield chunk
                try:
                    total += _write_member(root_fd, name.split("/"), chunks())
                except FileExistsError:
                    raise ArchiveError(f"member {name!r} appears twice") from None
                names.append(name)
    except (tarfile.TarError, EOFError, OSError, ValueError) as e:
        if isinstance(e, ArchiveError):
            raise
        raise ArchiveError(f"cannot read the archive: {e}") from None
    finally:
        os.close(root_fd)
    return names


# -- import -----------------------------------------------------------------------------------------
@dataclass
class Staged:
    key: str
    files: dict[str, bytes]
    record: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    problem: str | None = None


def _check_entry(key: str, files: dict[str, bytes]) -> Staged:
    st = Staged(key, files)
    try:
        if MANIFEST not in files:
            raise CorruptEntry("no manifest")
        man = validate.manifest(json.loads(files[MANIFEST]))
        if man["key"] != key:
            raise CorruptEntry("the manifest is for another key")
        listed = set(man["files"])
        extra = set(files) - listed - {MANIFEST}
        if extra:
            raise CorruptEntry(f"files not in the manifest: {sorted(extra)}")
        for name, info in man["files"].items():
            if validate.is_bytecode_name(name):
                continue  # never used: rebuilt from the source after install
            if name not in files:
                raise CorruptEntry(f"{name} is missing")
            if hashlib.sha256(files[name]).hexdigest() != info["sha256"]:
                raise CorruptEntry(f"checksum mismatch in {name}")
        st.record = validate.record(json.loads(files[RECORD])) if RECORD in files else {}
        if not st.record or key_of(st.record) != key:
            raise CorruptEntry("its record does not hash to its key")
        st.meta = validate.meta(json.loads(files[META])) if META in files else {}
        if PLAN in files:
            validate.plan(json.loads(files[PLAN]))
        audit_sources({n: b for n, b in files.items() if n.endswith(".py")})
    except (CorruptEntry, AuditError, ValueError) as e:
        st.problem = str(e)
    return st


def _signature_status(files: dict[str, bytes], sig: bytes | None, key: bytes | None) -> str:
    """``"valid"``, ``"unsigned"``, ``"no key"``; raises :class:`ArchiveError` on a bad signature."""
    if sig is None:
        return "unsigned"
    if key is None:
        return "no key"
    try:
        doc = json.loads(sig)
        digests, mac = doc["files"], doc["hmac"]
        ok = isinstance(digests, dict) and isinstance(mac, str) and hmac.compare_digest(_mac(key, digests), mac)
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise ArchiveError("the signature does not match: the archive was changed after signing, or "
                           "signed with another key")
    actual = {n: hashlib.sha256(b).hexdigest() for n, b in files.items()}
    if actual != digests:
        raise ArchiveError("the archive's members differ from its signed list: it was changed after signing")
    return "valid"


def import_(store: Store, src: Path, *, trust: bool = False, dry_run: bool = False,
            sign_key: bytes | None = None, limits: Limits = Limits()) -> dict[str, Any]:
    """Stage, check and (when trusted and not a dry run) install the entries of ``src``.

    Returns ``{imported, already_present, bad, entries, signature, installed}``; ``entries`` lists every
    key with its graph name, kind and files (what ``--dry-run`` prints). Raises :class:`ArchiveError`
    when the archive is refused as a whole (nothing is installed then).
    """
    # a private dir inside the root, named so that a sweep removes it if this process dies
    staging = Path(tempfile.mkdtemp(prefix=f"{IMPORT_PREFIX}{host_tag()}-{os.getpid()}-", dir=store.root))
    try:
        names = extract(src, staging, limits)
        raw: dict[str, bytes] = {}
        for n in names:
            with open(staging / n, "rb") as f:
                raw[n] = f.read()
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    sig = raw.pop(SIGNATURE, None)
    status = _signature_status(raw, sig, sign_key)
    grouped: dict[tuple[str, str], dict[str, bytes]] = {}
    for n, data in raw.items():
        v, _shard, key, fname = _MEMBER.match(n).groups()  # type: ignore[union-attr]
        grouped.setdefault((v, key), {})[fname] = data
    staged, bad = [], []
    for (v, key), files in sorted(grouped.items()):
        if int(v) != SCHEMA_VERSION:
            bad.append({"key": key, "problem": f"written by cache schema v{v}, this is v{SCHEMA_VERSION}"})
            continue
        st = _check_entry(key, files)
        if st.problem:
            bad.append({"key": key, "problem": st.problem})
        staged.append(st)
    listing = [{"key": s.key, "graph_name": s.meta.get("graph_name", "?"), "kind": s.record.get("kind", "?"),
                "files": {n: len(b) for n, b in sorted(s.files.items())}, "ok": s.problem is None,
                "problem": s.problem} for s in staged]
    trusted = status == "valid" or trust
    res: dict[str, Any] = {"imported": [], "already_present": [], "bad": bad, "entries": listing,
                           "signature": status, "trusted": trusted, "installed": False}
    if dry_run or not trusted:
        return res
    from neuron_inductor.runtime.loader import bytecode_files

    how = "signature" if status == "valid" else "--trust"
    for s in staged:
        if s.problem:
            continue
        if store.entry_dir(s.key).exists():
            res["already_present"].append(s.key)
            continue
        files: dict[str, str | bytes] = {n: b for n, b in s.files.items()
                                         if n not in (MANIFEST, RECORD, META)
                                         and not validate.is_bytecode_name(n)}
        sources = {n: b.decode("utf-8") for n, b in files.items() if n.endswith(".py")}  # type: ignore[union-attr]
        files.update(bytecode_files(sources))
        store.write(s.key, s.record, files, s.meta,
                    extra_manifest={"imported": {"archive": Path(src).name, "at": time.time(), "trusted_by": how}})
        res["imported"].append(s.key)
    res["installed"] = True
    return res


__all__ = ["ArchiveError", "Limits", "SIGNATURE", "export", "extract", "import_", "make_key", "read_key"]
