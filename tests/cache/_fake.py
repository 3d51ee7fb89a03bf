"""A stand-in compiler for cache tests: a tiny graph and a compile_fn that counts its calls in a file.

Counting in a file (not a global) lets tests prove that *other processes* did not compile.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.fx

from neuron_inductor.cache import Artifact

WRAPPER = "def call(args):\n    return [args[0] * 2]\n"
KERNELS = "from neuron_inductor.runtime.nki import nki, nl, nisa\n"


def double(x):
    return x * 2


def graph() -> torch.fx.GraphModule:
    return torch.fx.symbolic_trace(double)


def make_compile_fn(count_file: Path | None, graph_name: str = "double", fail: bool = False,
                    meta: dict | None = None):
    def compile_fn() -> Artifact:
        if count_file is not None:
            with open(count_file, "a") as f:
                f.write("compiled\n")
        if fail:
            raise RuntimeError("lowering failed")
        m = {"graph_name": graph_name, "compile_seconds": 1.5, "n_kernels": 1}
        m.update(meta or {})
        return Artifact(sources={"kernels.py": KERNELS, "wrapper.py": WRAPPER}, meta=m)

    return compile_fn


def compiles(count_file: Path) -> int:
    return len(count_file.read_text().splitlines()) if count_file.exists() else 0
