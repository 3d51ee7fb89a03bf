"""Helpers for import tests: a real compiled cache (made once per session), its honest export, and
archives built member by member."""
from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

import torch

from neuron_inductor.cache import Store, clear_memory
from neuron_inductor.cache.transfer import export

X = torch.arange(4.0)


def model(x, w):
    h = torch.relu(x @ w)
    return h.sum(), h.argmax(-1)  # argmax runs as a declared host fallback


def inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(4, 8, generator=g), torch.randn(8, 16, generator=g).requires_grad_()


@dataclass
class Real:
    """A cache holding the forward, backward and Dynamo plan of :func:`model` (never modified)."""

    root: Path
    members: dict[str, bytes]  # the honest export, by member name
    forward: str
    backward: str
    plan: str

    def store_copy(self, dest: Path) -> Store:
        shutil.copytree(self.root, dest)
        return Store(dest)


def make_real(root: Path, tmp: Path) -> Real:
    torch._dynamo.reset()
    clear_memory()
    x, w = inputs()
    torch.compile(model, backend="neuron", options={"cache_dir": str(root)})(x, w)[0].backward()
    torch._dynamo.reset()
    clear_memory()
    store = Store(root)
    kinds = {e.read_json("record.json")["kind"]: e.key for e in store.entries()}
    tar = tmp / "honest.tar.gz"
    export(store, tar)
    with tarfile.open(tar) as t:
        members = {m.name: t.extractfile(m).read() for m in t.getmembers()}
    return Real(root, members, kinds["forward"], kinds["backward"], kinds["dynamo"])


def run_model(cache_dir: Path):
    """Compile and run :func:`model` against ``cache_dir``; ``(outputs, grad, eager outputs, grad)``."""
    from neuron_inductor.cache import reset_stats

    torch._dynamo.reset()
    clear_memory()
    reset_stats()
    x, w = inputs()
    out = torch.compile(model, backend="neuron", options={"cache_dir": str(cache_dir)})(x, w)
    out[0].backward()
    got = (out[0].detach(), out[1], w.grad.clone())
    x, w = inputs()
    ref = model(x, w)
    ref[0].backward()
    torch._dynamo.reset()
    return got, (ref[0].detach(), ref[1], w.grad.clone())


def assert_matches_eager(cache_dir: Path) -> None:
    got, ref = run_model(cache_dir)
    torch.testing.assert_close(got[0], ref[0])
    assert torch.equal(got[1], ref[1])
    torch.testing.assert_close(got[2], ref[2])


def prefix(key: str, name: str) -> str:
    return f"v1/{key[:2]}/{key}/{name}"


def reseal(files: dict[str, bytes], key: str, **replace: bytes) -> dict[str, bytes]:
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


def sign(files: dict[str, bytes], key: bytes) -> dict[str, bytes]:
    """``files`` plus a valid signature under ``key`` (what a trusted exporter would write)."""
    from neuron_inductor.cache.transfer import SIGNATURE, _mac

    files = {n: b for n, b in files.items() if n != SIGNATURE}
    digests = {n: hashlib.sha256(b).hexdigest() for n, b in files.items()}
    files[SIGNATURE] = json.dumps({"format": 1, "files": digests, "hmac": _mac(key, digests)}).encode()
    return files


def build(path: Path, files: dict[str, bytes], extra: list[tuple[tarfile.TarInfo, bytes | None]] = (),
          fmt: int = tarfile.PAX_FORMAT) -> Path:
    """A .tar.gz with ``extra`` raw members (links, devices...), then ``files`` as regular members."""
    with tarfile.open(path, "w:gz", format=fmt) as t:
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


def populate(cache_dir: Path) -> tuple[Store, str]:
    """One entry made by the stand-in compiler (the fake doubling graph); returns the store and key."""
    from _fake import graph, make_compile_fn
    from neuron_inductor.cache import compile_cached
    from neuron_inductor.config import get_config

    compile_cached(graph(), [X], "inference", get_config(), make_compile_fn(None))
    clear_memory()
    store = Store(cache_dir)
    (e,) = store.entries()
    return store, e.key


def run_cli(cache_dir, *args):
    """``neuron-inductor cache --cache-dir DIR ARGS`` in this process (a subprocess costs a second)."""
    import contextlib
    import io
    import types

    from neuron_inductor.cli.cache import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(["--cache-dir", str(cache_dir), *args])
        except Exception:  # noqa: BLE001 - a traceback is what the tests look for
            import traceback
            err.write("Traceback\n" + traceback.format_exc())
            rc = 99
    return types.SimpleNamespace(returncode=rc, stdout=out.getvalue(), stderr=err.getvalue())
