"""Helpers for import tests: a real exported entry and archives built member by member."""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

import torch

from _fake import graph, make_compile_fn
from neuron_inductor.cache import Store, clear_memory, compile_cached
from neuron_inductor.cache.transfer import export
from neuron_inductor.config import get_config

X = torch.arange(4.0)


def populate(cache_dir: Path) -> tuple[Store, str]:
    """One entry (the fake doubling graph); returns the store and its key."""
    compile_cached(graph(), [X], "inference", get_config(), make_compile_fn(None))
    clear_memory()
    store = Store(cache_dir)
    (e,) = store.entries()
    return store, e.key


def members_of(store: Store, tmp: Path, sign_key: bytes | None = None) -> dict[str, bytes]:
    """The members an honest export of ``store`` holds, by name."""
    tar = tmp / "honest.tar.gz"
    export(store, tar, sign_key=sign_key)
    with tarfile.open(tar) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers()}


def build(path: Path, files: dict[str, bytes], extra: list[tuple[tarfile.TarInfo, bytes | None]] = ()):
    """A .tar.gz with ``files`` as regular members, then ``extra`` raw members (links, devices...)."""
    with tarfile.open(path, "w:gz") as t:
        for info, data in extra:
            t.addfile(info, io.BytesIO(data) if data is not None else None)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def member(name: str, kind: bytes, linkname: str = "", size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, linkname, size
    return info
