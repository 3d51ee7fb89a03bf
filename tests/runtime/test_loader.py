"""Loading compiled graphs from directories / in-memory sources."""
from __future__ import annotations

import os
import stat
import traceback

import pytest

from neuron_inductor.runtime.loader import CompiledModule, load_dir, load_sources

KERNELS = "SCALE = {scale}\n"
WRAPPER = """from neuron_inductor.runtime import host
kernels = host.load_sibling(__file__, "kernels")


def call(args):
    (x,) = args
    args.clear()
    if x is None:
        raise RuntimeError("boom from the wrapper")
    return (x * kernels.SCALE,)
"""


def test_load_sources_runs_and_exposes_sources():
    m = load_sources({"kernels.py": KERNELS.format(scale=3), "wrapper": WRAPPER})
    assert isinstance(m, CompiledModule)
    args = [2]
    assert m(args) == (6,) and args == []
    assert m.kernels_source == "SCALE = 3\n" and m.wrapper_source == WRAPPER
    assert os.path.isfile(os.path.join(m.path, "wrapper.py"))
    assert stat.S_IMODE(os.stat(m.path).st_mode) == 0o700  # private temp dir


def test_two_graphs_never_collide():
    a = load_sources({"kernels": KERNELS.format(scale=2), "wrapper": WRAPPER})
    b = load_sources({"kernels": KERNELS.format(scale=5), "wrapper": WRAPPER})
    assert a.path != b.path
    assert a([1]) == (2,) and b([1]) == (5,)
    assert a.wrapper.__name__ != b.wrapper.__name__


def test_traceback_shows_generated_source_line():
    m = load_sources({"kernels": KERNELS.format(scale=1), "wrapper": WRAPPER})
    with pytest.raises(RuntimeError) as info:
        m([None])
    text = "".join(traceback.format_exception(info.value))
    assert os.path.join(m.path, "wrapper.py") in text
    assert 'raise RuntimeError("boom from the wrapper")' in text


def test_load_dir(tmp_path):
    (tmp_path / "kernels.py").write_text(KERNELS.format(scale=7))
    (tmp_path / "wrapper.py").write_text(WRAPPER)
    m = load_dir(str(tmp_path))
    assert m([1]) == (7,) and m.path == str(tmp_path)
    with pytest.raises(FileNotFoundError, match="no wrapper.py"):
        load_dir(str(tmp_path / "missing"))


def test_bad_file_name_refused():
    with pytest.raises(ValueError, match="bad generated file name"):
        load_sources({"../evil.py": "", "wrapper.py": WRAPPER})


def test_loading_writes_no_bytecode_next_to_the_sources(tmp_path, monkeypatch):
    """A cache entry's directory is checksummed and size-accounted: importing it must not add
    ``__pycache__`` (it did, and LRU eviction then saw entries grow)."""
    import sys

    from neuron_inductor.runtime import loader
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    d = tmp_path / "entry"
    d.mkdir()
    (d / "kernels.py").write_text("X = 1\n")
    (d / "wrapper.py").write_text(
        "from neuron_inductor.runtime import host\n"
        "kernels = host.load_sibling(__file__, 'kernels')\n"
        "def call(args):\n    return (kernels.X,)\n")
    mod = loader.load_dir(str(d))
    assert mod([]) == (1,)
    assert sorted(p.name for p in d.iterdir()) == ["kernels.py", "wrapper.py"]


def _entry_with_bytecode(d, scale=7):
    from neuron_inductor.runtime.loader import bytecode_files

    sources = {"kernels.py": KERNELS.format(scale=scale), "wrapper.py": WRAPPER}
    d.mkdir()
    for name, text in sources.items():
        (d / name).write_text(text)
    for name, data in bytecode_files(sources).items():
        (d / name).write_bytes(data)
    return sources


def test_stored_bytecode_is_used_instead_of_compiling(tmp_path, monkeypatch):
    from neuron_inductor.runtime import host

    d = tmp_path / "entry"
    _entry_with_bytecode(d)
    assert sorted(p.name for p in d.iterdir()) == sorted(
        ["kernels.py", "wrapper.py", "kernels" + host.BYTECODE_SUFFIX, "wrapper" + host.BYTECODE_SUFFIX])

    def no_compile(*a, **k):
        raise AssertionError("compiled a source that has stored bytecode")
    monkeypatch.setattr(host, "compile", no_compile, raising=False)  # shadows the builtin in host
    m = load_dir(str(d))
    assert m([1]) == (7,)
    # compiled as "wrapper.py" elsewhere; tracebacks still name the file actually loaded
    with pytest.raises(RuntimeError) as info:
        m([None])
    assert str(d / "wrapper.py") in "".join(traceback.format_exception(info.value))


def test_stale_or_damaged_bytecode_falls_back_to_the_source(tmp_path, monkeypatch):
    from neuron_inductor.runtime import host

    d = tmp_path / "entry"
    _entry_with_bytecode(d, scale=7)
    (d / "kernels.py").write_text(KERNELS.format(scale=9))  # source changed after the bytecode
    assert load_dir(str(d))([1]) == (9,)
    (d / ("kernels" + host.BYTECODE_SUFFIX)).write_bytes(b"garbage")
    assert load_dir(str(d))([1]) == (9,)


def test_bytecode_files_skips_what_does_not_compile():
    from neuron_inductor.runtime.loader import bytecode_files

    out = bytecode_files({"kernels.py": "def broken(:\n", "wrapper.py": WRAPPER, "notes.txt": "x"})
    from neuron_inductor.runtime.host import BYTECODE_SUFFIX
    assert list(out) == ["wrapper" + BYTECODE_SUFFIX]


def test_uncached_loads_remove_their_temp_dirs():
    """Every uncached load (cache=False, a bypass) used to leave a /tmp/neuron_inductor_* dir."""
    import gc

    m = load_sources({"kernels": KERNELS.format(scale=2), "wrapper": WRAPPER})
    path = m.path
    assert os.path.isdir(path)
    del m
    gc.collect()
    assert not os.path.exists(path)


def test_temp_dirs_of_dead_processes_are_swept(monkeypatch):
    import tempfile

    from neuron_inductor.runtime import loader

    dead = tempfile.mkdtemp(prefix="neuron_inductor_999999999_")
    monkeypatch.setattr(loader, "_swept", [False])
    load_sources({"kernels": KERNELS.format(scale=2), "wrapper": WRAPPER})
    assert not os.path.exists(dead)
