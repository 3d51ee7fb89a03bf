"""Load a compiled graph (``kernels.py`` + ``wrapper.py``) from a directory as a callable.

Generated code always runs from real files: a cache entry directory, or a fresh private temp dir for
sources that only exist in memory. That way tracebacks, ``inspect`` and the simulator's line numbers
point at the lines a person can open.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import weakref
from types import ModuleType
from typing import Any

from . import host, placement

_FILE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.py$")


class CompiledModule:
    """A loaded compiled graph; ``module(args)`` runs it (and clears ``args``, as the wrapper does)."""

    def __init__(self, path: str, wrapper: ModuleType) -> None:
        self.path = path
        self.wrapper = wrapper
        self.kernels = getattr(wrapper, "kernels", None)
        self.kernels_source = _read(os.path.join(path, "kernels.py"))
        self.wrapper_source = _read(os.path.join(path, "wrapper.py"))
        nki = getattr(self.kernels, "nki", None)
        #: whether the kernels were loaded against the device runtime (TorchNeuron), not the simulator
        self.on_device = nki is not None and getattr(nki, "is_simulator", True) is False
        if self.on_device:
            placement.mark_constants(wrapper)

    def __call__(self, args: list) -> Any:
        if not self.on_device:
            return self.wrapper.call(args)
        device = _device_of(args)
        placement.to_graph_device(args, device)
        with placement.running_on(device):
            out = self.wrapper.call(args)
        placement.check_outputs(out, device)
        return out

    def __repr__(self) -> str:
        return f"CompiledModule({self.path!r})"


def _device_of(args: list) -> Any:
    """The ``neuron`` device the graph's device tensors are on (the current one when none is)."""
    import torch

    for a in args:
        if isinstance(a, torch.Tensor) and a.device.type == placement.DEVICE_TYPE:
            return a.device
    return torch.device(placement.DEVICE_TYPE)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def load_dir(path: str) -> CompiledModule:
    """Import ``path/wrapper.py`` (which imports its sibling ``kernels.py``)."""
    path = os.path.abspath(path)
    wrapper_file = os.path.join(path, "wrapper.py")
    if not os.path.isfile(wrapper_file):
        raise FileNotFoundError(f"no wrapper.py in compiled module directory {path}")
    return CompiledModule(path, host.load_file(wrapper_file))


def bytecode_files(sources: dict[str, str]) -> dict[str, bytes]:
    """Compiled code for each ``.py`` source, by the file name :func:`load_dir` looks for.

    Stored in cache entries beside the sources so a hit does not recompile them; a stale or
    foreign file is ignored at load (it carries the source's hash and the bytecode magic).
    """
    out = {}
    for name, text in sources.items():
        if name.endswith(".py") and _FILE_NAME.match(name):
            try:
                out[name[:-3] + host.BYTECODE_SUFFIX] = host.bytecode_for(text, name)
            except SyntaxError:  # loading reports it against the source, with its line
                continue
    return out


def load_sources(sources: dict[str, str]) -> CompiledModule:
    """Write ``{"kernels.py": ..., "wrapper.py": ...}`` (``.py`` optional) to a fresh private temp dir
    (mode 0700, from ``mkdtemp``) and load it.

    The dir lives as long as the module (tracebacks can open its files) and is removed when the
    module is collected or the process exits; dirs of processes that died without exiting are
    swept by the next process that loads sources this way."""
    files = {}
    for name, text in sources.items():
        fname = name if name.endswith(".py") else f"{name}.py"
        if not _FILE_NAME.match(fname):
            raise ValueError(f"bad generated file name {name!r}")
        files[fname] = text
    _sweep_dead_temp_dirs()
    path = tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{os.getpid()}_")
    try:
        for fname, text in files.items():
            with open(os.path.join(path, fname), "w", encoding="utf-8") as f:
                f.write(text)
        module = load_dir(path)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    weakref.finalize(module, shutil.rmtree, path, True)
    return module


_TMP_PREFIX = "neuron_inductor_"
_swept = [False]


def _sweep_dead_temp_dirs() -> None:
    """Remove ``neuron_inductor_<pid>_*`` temp dirs whose process is gone (killed runs)."""
    if _swept[0]:
        return
    _swept[0] = True
    tmp = tempfile.gettempdir()
    try:
        names = os.listdir(tmp)
    except OSError:
        return
    for name in names:
        pid = name[len(_TMP_PREFIX):].split("_")[0]
        if not (name.startswith(_TMP_PREFIX) and pid.isdigit()) or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # alive (or reused: then the dir is left for its exit to remove)
        except ProcessLookupError:
            pass
        except OSError:
            continue
        path = os.path.join(tmp, name)
        if os.path.isdir(path) and not os.path.islink(path) and os.stat(path).st_uid == os.getuid():
            shutil.rmtree(path, ignore_errors=True)
