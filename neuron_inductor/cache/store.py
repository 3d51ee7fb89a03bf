"""The on-disk tier: one directory per key, published by atomic rename, trusted only via its manifest.

Layout::

    <root>/v<schema>/<key[:2]>/<key>/   kernels.py wrapper.py record.json meta.json  manifest.json  hits
    <root>/v<schema>/<key[:2]>/<key>.lock     per-key single-flight lock
    <root>/v<schema>/<key[:2]>/.tmp-*         entries being written (swept when stale)
    <root>/quarantine/                         entries that failed verification, kept for inspection
    <root>/.import-*                           archives being imported (swept when stale)
    <root>/CACHEDIR.TAG                        the marker without which nothing is ever deleted

``manifest.json`` is written last, inside the temp dir, before the rename; an entry without a
manifest, or whose files do not match its checksums, is never executed. ``hits`` is outside the
manifest: it grows by one byte per hit (an O_APPEND write is atomic across processes) and its mtime is
the last-hit time that LRU eviction sorts by.

Only what the cache created is the cache's: the marker file (the ``CACHEDIR.TAG`` convention of
ccache and backup tools) is written only into a root the cache creates or finds empty, and a
non-empty root without it is refused by every command (``cache adopt`` claims one deliberately).
Deletion never leaves the cache: only names of our own shape (``v<N>``, two hex digits, a 64-hex
key) that are real directories, not symlinks, are ever listed or removed. Writes never follow a
link they did not create (``hits`` is opened ``O_NOFOLLOW``), and every JSON read is bounded.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from . import validate
from .schema import SCHEMA_VERSION, key_of
from .validate import HEX2, HEX64, HITS, MANIFEST, META, PLAN, RECORD, VERSION_DIR, SchemaError

log = logging.getLogger("neuron_inductor.cache")

TMP_PREFIX = ".tmp-"
IMPORT_PREFIX = ".import-"
STALE_TMP_SECONDS = 3600
MARKER = "CACHEDIR.TAG"
MARKER_TEXT = ("Signature: 8a477f597d28d172789f06886806bc55\n"
               "# This file is a cache directory tag created by neuron_inductor.\n"
               "# Its compile cache commands delete nothing in a directory without it.\n")


class CacheSecurityError(RuntimeError):
    """The cache dir could be written by someone else; its entries are code we would execute."""


class CorruptEntry(Exception):
    """An entry failed verification (missing manifest, checksum mismatch, unreadable file)."""


class NotACacheError(CacheSecurityError):
    """A destructive command was pointed at a directory that is not a compile cache."""


def default_root(cfg: Any = None) -> Path:
    """``cfg.cache_dir``, else ``$NEURON_INDUCTOR_CACHE_DIR``, else the XDG user cache dir."""
    explicit = getattr(cfg, "cache_dir", None) or os.environ.get("NEURON_INDUCTOR_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "neuron_inductor"


def check_secure(path: Path) -> None:
    """Raise :class:`CacheSecurityError` unless ``path`` is owned by us and not group/other-writable."""
    st = os.stat(path)
    problems = []
    if st.st_uid != os.getuid():
        problems.append(f"it is owned by uid {st.st_uid}, not by you (uid {os.getuid()})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problems.append(f"it is writable by {'group' if st.st_mode & stat.S_IWGRP else ''}"
                        f"{'/' if st.st_mode & stat.S_IWGRP and st.st_mode & stat.S_IWOTH else ''}"
                        f"{'others' if st.st_mode & stat.S_IWOTH else ''} (mode {stat.filemode(st.st_mode)})")
    if problems:
        raise CacheSecurityError(
            f"neuron_inductor refuses to use the compile cache directory {path}: "
            + " and ".join(problems) + ". Cached entries are Python code that gets executed, so "
            "anyone who can write there could run code as you. Fix it with "
            f"`chmod 700 {path}` (and make sure you own it), or choose a private directory with "
            "NEURON_INDUCTOR_CACHE_DIR=... or options={'cache_dir': ...}.")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _mkdir_private(path: Path) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass


def write_marker(root: Path) -> None:
    """Write the marker (``O_EXCL|O_NOFOLLOW``: never through a link; a concurrent writer wins)."""
    try:
        fd = os.open(root / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as f:
        f.write(MARKER_TEXT)


def _claim(root: Path, created: bool) -> None:
    """Make ``root`` ours only when we created it or it is empty; refuse anything else unmarked.

    A directory that holds files and no marker is someone's folder (``--cache-dir`` pointing at the
    wrong place), even when its names look like ours (``v1/``, ``quarantine/``): every command,
    read-only ones included, refuses it rather than listing, writing or deleting there."""
    if is_marked(root):
        return
    try:
        empty = not any(True for _ in os.scandir(root))
    except OSError as e:
        raise NotACacheError(f"cannot read the compile cache directory {root}: {e}") from None
    if created or empty:
        try:
            write_marker(root)
        except OSError as e:  # a read-only empty dir: nothing in it to protect
            log.debug("could not write %s in %s: %s", MARKER, root, e)
        return
    raise NotACacheError(
        f"{root} is not a neuron_inductor compile cache: it is not empty and has no {MARKER} marker "
        "file, so nothing was read, written or deleted there. Check --cache-dir and "
        "NEURON_INDUCTOR_CACHE_DIR. If it really is a neuron_inductor cache (made by a version without "
        f"the marker), adopt it deliberately with `neuron-inductor cache adopt --cache-dir {root}`.")


def is_marked(root: Path) -> bool:
    """Whether ``root`` carries our marker file (a regular file with the CACHEDIR.TAG signature)."""
    try:
        st = os.lstat(root / MARKER)
        with open(root / MARKER, encoding="utf-8", errors="replace") as f:
            head = f.read(64)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and head.startswith(MARKER_TEXT.splitlines()[0])


@dataclass
class EntryInfo:
    """What ``list``/``prune``/``explain`` need about one entry, read without executing anything."""

    key: str
    path: Path
    manifest: dict | None
    size: int
    created: float
    last_used: float
    hits: int

    def read_json(self, name: str) -> dict:
        """The file checked against its schema; ``{}`` when missing or of the wrong shape."""
        check = {META: validate.meta, RECORD: validate.record, PLAN: validate.plan}.get(name, validate.meta)
        try:
            return check(validate.read_json(self.path / name))
        except (OSError, ValueError):
            return {}


class Store:
    """One cache root. Creating it makes the root (0700) and checks its permissions."""

    def __init__(self, root: Path | str, *, create: bool = True) -> None:
        self.root = Path(root)
        created = False
        if create and not os.path.lexists(self.root):
            self.root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                os.mkdir(self.root, 0o700)
                created = True
            except FileExistsError:
                pass
        check_secure(self.root)
        self.vdir = self.root / f"v{SCHEMA_VERSION}"
        _claim(self.root, created)

    def require_marker(self) -> None:
        """Raise :class:`NotACacheError` unless the root carries our marker file (it does whenever
        the constructor accepted a non-empty root; an empty read-only root may lack it)."""
        if not is_marked(self.root):
            raise NotACacheError(
                f"{self.root} is not a neuron_inductor compile cache (no {MARKER} marker file with the "
                "cache signature), so nothing was deleted. Check --cache-dir and "
                "NEURON_INDUCTOR_CACHE_DIR; a cache made by neuron_inductor always carries the marker.")

    # -- paths --------------------------------------------------------------------------------------
    def entry_dir(self, key: str) -> Path:
        return self.vdir / key[:2] / key

    def lock_path(self, key: str) -> Path:
        return self.vdir / key[:2] / f"{key}.lock"

    def ensure_parent(self, key: str) -> Path:
        _mkdir_private(self.vdir)
        parent = self.vdir / key[:2]
        _mkdir_private(parent)
        return parent

    def check_entry_secure(self, key: str) -> None:
        """Every directory from the root down to the entry must be private before we execute it."""
        for p in (self.root, self.vdir, self.vdir / key[:2], self.entry_dir(key)):
            check_secure(p)

    # -- read ---------------------------------------------------------------------------------------
    def verify(self, entry: Path) -> dict:
        """The manifest if every listed file matches its checksum, else :class:`CorruptEntry`.

        Every JSON read is bounded (size, depth); any failure to read or parse is corruption."""
        try:
            manifest = validate.manifest(validate.read_json(entry / MANIFEST))
        except FileNotFoundError as e:
            raise CorruptEntry(f"{entry}: no manifest (incomplete write)") from e
        except SchemaError as e:
            raise CorruptEntry(f"{entry}: malformed manifest: {e}") from e
        except (OSError, ValueError) as e:
            raise CorruptEntry(f"{entry}: unreadable manifest: {e}") from e
        files = manifest["files"]
        for name, info in files.items():
            try:
                digest = sha256_file(entry / name)
            except OSError as e:
                raise CorruptEntry(f"{entry}: {name} unreadable: {e}") from e
            if digest != info["sha256"]:
                raise CorruptEntry(f"{entry}: checksum mismatch in {name}")
        check = {RECORD: validate.record, META: validate.meta, PLAN: validate.plan}
        for name, fn in check.items():
            if name not in files:
                continue
            try:
                obj = fn(validate.read_json(entry / name))
            except (OSError, ValueError) as e:
                raise CorruptEntry(f"{entry}: malformed {name}: {e}") from e
            if name == RECORD and key_of(obj) != manifest["key"]:
                raise CorruptEntry(f"{entry}: {RECORD} does not hash to the entry's key")
        if RECORD not in files:
            raise CorruptEntry(f"{entry}: the manifest lists no {RECORD}")
        if manifest["key"] != entry.name:
            raise CorruptEntry(f"{entry}: the manifest is for key {manifest['key'][:12]}")
        return manifest

    def lookup(self, key: str) -> tuple[Path, dict] | None:
        """A verified entry, or None. Corrupt entries are quarantined and raise :class:`CorruptEntry`."""
        entry = self.entry_dir(key)
        if not _real_dir(entry):
            if entry.is_symlink():
                raise CorruptEntry(f"{entry} is a symlink, not an entry")
            return None
        self.check_entry_secure(key)
        try:
            return entry, self.verify(entry)
        except CorruptEntry:
            self.quarantine(entry)
            raise

    def touch_hit(self, entry: Path) -> None:
        """One byte appended to ``hits``; never through a symlink planted in its place."""
        try:
            fd = os.open(entry / HITS, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, b".")
            finally:
                os.close(fd)
        except OSError as e:  # a read-only shared cache still serves hits
            log.debug("could not record hit in %s: %s", entry, e)

    def quarantine(self, entry: Path) -> Path | None:
        """Move a bad entry aside (kept for inspection) so it is never read again."""
        qdir = self.root / "quarantine"
        try:
            _mkdir_private(qdir)
            dest = qdir / f"{entry.name}-{int(time.time())}-{os.getpid()}"
            os.rename(entry, dest)
            return dest
        except OSError as e:
            log.debug("could not quarantine %s: %s; removing", entry, e)
            _remove_tree(entry, self.vdir)
            return None

    # -- write --------------------------------------------------------------------------------------
    def write(self, key: str, record: dict, sources: dict[str, str | bytes], meta: dict,
              extra_manifest: dict | None = None) -> Path:
        """Build the entry in a temp dir beside it and publish it with one rename.

        ``sources`` are the generated files (text) and their compiled code (bytes); the manifest
        checksums every one of them.
        """
        for name in sources:
            if not validate.is_entry_file(name) or name in (MANIFEST, RECORD, META):
                raise ValueError(f"artifact file name {name!r} is not one an entry may hold")
        parent = self.ensure_parent(key)
        tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{key[:16]}-{host_tag()}-{os.getpid()}-", dir=parent))
        try:
            files: dict[str, dict] = {}
            payload = dict(sources)
            payload[RECORD] = json.dumps(record, indent=1, sort_keys=True)
            payload[META] = json.dumps(meta, indent=1, sort_keys=True, default=str)
            for name, text in payload.items():
                data = text if isinstance(text, bytes) else text.encode()
                _write_file(tmp / name, data)
                files[name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
            manifest = {"schema": SCHEMA_VERSION, "key": key, "created": time.time(),
                        "package_version": record.get("package", {}).get("version"), "files": files,
                        "bytes": sum(f["size"] for f in files.values()), **(extra_manifest or {})}
            _write_file(tmp / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode(),
                        sync=True)
            entry = self.entry_dir(key)
            try:
                os.rename(tmp, entry)
            except OSError:
                if entry.is_dir():  # someone (lock-less writer, import) published first: keep theirs
                    _remove_tree(tmp, parent)
                    return entry
                raise
            return entry
        except BaseException:
            _remove_tree(tmp, parent)
            raise

    # -- housekeeping -------------------------------------------------------------------------------
    def sweep_temps(self, max_age: float = STALE_TMP_SECONDS) -> int:
        """Remove temp dirs left by crashed writers and killed imports: older than ``max_age`` or
        whose process (on this host) is gone."""
        removed = 0
        me = host_tag()
        now = time.time()
        places = [(self.root, IMPORT_PREFIX)]
        for vdir in self.version_dirs():
            places += [(shard, TMP_PREFIX) for shard in _shards(vdir)]
        for parent, prefix in places:
            for name in _listdir(parent):
                if not name.name.startswith(prefix) or not _real_dir(name):
                    continue
                parts = name.name[len(prefix):].split("-")
                dead = parts[0] == "rm"  # a removal interrupted half way
                if prefix == IMPORT_PREFIX:
                    parts = ["", *parts]
                if len(parts) >= 3 and parts[1] == me and parts[2].isdigit():
                    dead = dead or not _pid_alive(int(parts[2]))
                try:
                    old = now - name.lstat().st_mtime > max_age
                except OSError:
                    continue
                if dead or old:
                    _remove_tree(name, parent)
                    removed += 1
        return removed

    def version_dirs(self, all_versions: bool = True) -> list[Path]:
        """``v<N>`` directories (never symlinks, never look-alikes such as ``venv``)."""
        if not all_versions:
            return [self.vdir] if _real_dir(self.vdir) else []
        return sorted(p for p in _listdir(self.root) if VERSION_DIR.match(p.name) and _real_dir(p))

    def entries(self, all_versions: bool = False) -> Iterator[EntryInfo]:
        """Every published entry (corrupt ones too: manifest None), without verifying checksums."""
        for vdir in self.version_dirs(all_versions):
            for shard in _shards(vdir):
                for entry in sorted(_listdir(shard)):
                    if HEX64.match(entry.name) and entry.name[:2] == shard.name and _real_dir(entry):
                        yield self.info(entry)

    def info(self, entry: Path) -> EntryInfo:
        try:
            manifest: dict | None = validate.manifest(validate.read_json(entry / MANIFEST))
        except (OSError, ValueError):
            manifest = None
        size = 0
        newest = 0.0
        for f in _listdir(entry):
            try:
                st = f.lstat()
            except OSError:
                continue
            size += st.st_size
            newest = max(newest, st.st_mtime)
        created = (manifest or {}).get("created") or newest
        try:
            hst = os.lstat(entry / HITS)
            hits, last = (hst.st_size, hst.st_mtime) if stat.S_ISREG(hst.st_mode) else (0, 0.0)
        except OSError:
            hits, last = 0, 0.0
        return EntryInfo(key=entry.name, path=entry, manifest=manifest, size=size, created=created,
                         last_used=max(last, created), hits=hits)

    def remove(self, entry: Path) -> None:
        """Delete atomically from a reader's view: rename away first, then delete.

        Only a real directory named like an entry, inside a shard of this root, is ever removed.
        """
        entry = Path(entry)
        shard, vdir = entry.parent, entry.parent.parent
        if not (HEX64.match(entry.name) and HEX2.match(shard.name) and VERSION_DIR.match(vdir.name)
                and os.path.samefile(vdir.parent, self.root) and _real_dir(entry)
                and _real_dir(shard) and _real_dir(vdir)):
            raise NotACacheError(f"refusing to delete {entry}: not a cache entry of {self.root}")
        _remove_tree(entry, shard)

    def remove_dir(self, path: Path) -> None:
        """Delete a whole ``v<N>`` dir (another schema's entries) or the quarantine dir of this root."""
        path = Path(path)
        if not ((VERSION_DIR.match(path.name) or path.name == "quarantine") and path.parent == self.root
                and _real_dir(path)):
            raise NotACacheError(f"refusing to delete {path}: not a schema or quarantine dir of {self.root}")
        _remove_tree(path, self.root)

    def evict(self, max_bytes: int, keep: str | None = None) -> list[str]:
        """Drop least-recently-used entries until the cache fits in ``max_bytes``."""
        infos = list(self.entries())
        total = sum(e.size for e in infos)
        evicted: list[str] = []
        if total <= max_bytes:
            return evicted
        for e in sorted(infos, key=lambda e: e.last_used):
            if total <= max_bytes:
                break
            if e.key == keep:
                continue
            self.remove(e.path)
            total -= e.size
            evicted.append(e.key)
        return evicted

    def find(self, prefix: str) -> list[EntryInfo]:
        return [e for e in self.entries() if e.key.startswith(prefix)]


def _write_file(path: Path, data: bytes, sync: bool = False) -> None:
    with open(path, "wb") as f:
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())


def _shards(vdir: Path) -> list[Path]:
    return sorted(p for p in _listdir(vdir) if HEX2.match(p.name) and _real_dir(p))


def host_tag() -> str:
    """This host in temp dir names: a sweep judges by pid only the dirs of its own host."""
    return socket.gethostname().replace("-", "_")[:32]


def _real_dir(p: Path) -> bool:
    """A directory that is not a symlink (``Path.is_dir`` follows links)."""
    try:
        return stat.S_ISDIR(os.lstat(p).st_mode)
    except OSError:
        return False


def _listdir(p: Path) -> list[Path]:
    try:
        return list(p.iterdir())
    except OSError:
        return []


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_tree(path: Path, parent: Path) -> None:
    """Rename ``path`` into a fresh temp dir of ``parent``, then delete that: a symlink is removed as
    a link (``rmtree`` never follows one), never the directory it points to."""
    prefix = IMPORT_PREFIX + "rm-" if path.name.startswith(IMPORT_PREFIX) else TMP_PREFIX + "rm-"
    try:
        doomed = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        os.rename(path, doomed / "x")
        shutil.rmtree(doomed, ignore_errors=True)
    except OSError:
        if path.is_symlink():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=True)
