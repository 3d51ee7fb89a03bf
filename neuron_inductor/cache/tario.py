"""Reading archives ourselves: plain ustar members from a (gzip) stream, in bounded memory and time.

Python's ``tarfile`` parses pax extended headers with a regular expression that is quadratic in
the header's length (CVE-2024-6232: a 232-byte archive took seconds), follows GNU long-name
records, and ``tarfile.open(..., "r:*")`` probes compressions by reading ahead. An archive written
by ``cache export`` needs none of that: every member is a regular file with a short ASCII name in
a 512-byte ustar header. So the reader here accepts exactly that and refuses everything else by
its type flag, before reading any of its data:

* headers are parsed field by field (fixed offsets, checksum verified), never with a regex;
* member data is streamed in chunks straight to its destination, never held whole in memory, and
  counted against the caps while it is read (a gzip bomb stops at the cap, not at 4 GiB of RAM);
* reading stops at the end-of-archive marker: trailing bytes are never decompressed.

Reference: POSIX.1-2001 ``pax`` "ustar Interchange Format" (header layout and checksum).
"""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from dataclasses import dataclass
from typing import IO, BinaryIO, Callable, Iterator

BLOCK = 512
CHUNK = 1 << 20

#: type flags by what they are, for the refusal message
_KINDS = {b"1": "a hard link", b"2": "a symlink", b"3": "a device file", b"4": "a device file",
          b"5": "a directory", b"6": "a FIFO", b"7": "a contiguous file", b"x": "a pax extended header",
          b"g": "a pax global header", b"L": "a GNU long name", b"K": "a GNU long link name",
          b"S": "a sparse file"}


class TarFormatError(ValueError):
    """The stream is not an archive of plain ustar regular files; the message says why."""


@dataclass
class Member:
    name: str
    size: int


def open_stream(path: str | os.PathLike) -> BinaryIO:
    """The archive's tar stream: gunzipped on the fly when it starts with the gzip magic."""
    f = open(path, "rb")
    try:
        magic = f.read(2)
        f.seek(0)
    except OSError:
        f.close()
        raise
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]
    return f


def _octal(field: bytes, what: str) -> int:
    text = field.rstrip(b"\0 ").lstrip(b" ")
    if not text:
        return 0
    if not all(48 <= c <= 55 for c in text):  # base-256 (binary) numbers are refused too
        raise TarFormatError(f"header field {what} is not an octal number")
    return int(text, 8)


def _read_exact(stream: IO[bytes], n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def parse_header(block: bytes) -> Member:
    """One 512-byte header; :class:`TarFormatError` unless it is a plain regular file."""
    stored = _octal(block[148:156], "chksum")
    actual = sum(block[:148]) + 8 * 32 + sum(block[156:])
    if stored != actual:
        raise TarFormatError("header checksum mismatch (not a tar archive, or corrupt)")
    flag = block[156:157]
    try:
        name = block[0:100].split(b"\0", 1)[0].decode("ascii")
        prefix = block[345:500].split(b"\0", 1)[0].decode("ascii") if block[257:263] == b"ustar\0" else ""
    except UnicodeDecodeError:
        raise TarFormatError("member name is not ASCII") from None
    full = f"{prefix}/{name}" if prefix else name
    if flag not in (b"0", b"\0"):
        kind = _KINDS.get(flag, f"type {flag!r}")
        raise TarFormatError(f"member {full!r} is {kind}; only regular files are accepted")
    return Member(full, _octal(block[124:136], "size"))


def members(stream: IO[bytes]) -> Iterator[tuple[Member, Callable[[], Iterator[bytes]]]]:
    """``(member, chunks)`` in archive order; ``chunks()`` yields the member's data (call it, or not:
    unread data is skipped). Stops at the end-of-archive marker (a zero block)."""
    while True:
        block = _read_exact(stream, BLOCK)
        if len(block) == 0:
            return  # no end marker: tolerated, like tar
        if len(block) < BLOCK:
            raise TarFormatError("truncated header")
        if block == b"\0" * BLOCK:
            return
        m = parse_header(block)
        left = [m.size]

        def chunks(left: list = left) -> Iterator[bytes]:
            while left[0] > 0:
                data = stream.read(min(CHUNK, left[0]))
                if not data:
                    raise TarFormatError("truncated member data")
                left[0] -= len(data)
                yield data

        yield m, chunks
        for _ in chunks():  # skip what the consumer did not read
            pass
        pad = (-m.size) % BLOCK
        if pad and len(_read_exact(stream, pad)) != pad:
            raise TarFormatError("truncated member padding")


def write_archive(dest: str | os.PathLike, files: list[tuple[str, str | os.PathLike | bytes]],
                  mtime: int) -> None:
    """A ``.tar.gz`` of plain ustar regular files (no pax headers), each streamed from its path
    (or given as bytes)."""
    with tarfile.open(dest, "w:gz", format=tarfile.USTAR_FORMAT) as tar:
        for name, src in files:
            info = tarfile.TarInfo(name)
            info.mode, info.mtime = 0o600, mtime
            if isinstance(src, bytes):
                info.size = len(src)
                tar.addfile(info, io.BytesIO(src))
            else:
                with open(src, "rb") as f:
                    info.size = os.fstat(f.fileno()).st_size
                    tar.addfile(info, f)


def sha256_stream(chunks: Iterator[bytes], sink: Callable[[bytes], None]) -> tuple[str, int]:
    """Feed ``chunks`` to ``sink`` while hashing them: ``(hexdigest, bytes)``."""
    h, n = hashlib.sha256(), 0
    for c in chunks:
        h.update(c)
        n += len(c)
        sink(c)
    return h.hexdigest(), n


__all__ = ["TarFormatError", "Member", "open_stream", "members", "parse_header", "write_archive",
           "sha256_stream"]
