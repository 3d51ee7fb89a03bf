"""Typed compiler options.

Every option has a default, an environment variable that overrides the default, and can be set per
``torch.compile`` call through ``options={...}`` or for a block of code with :func:`patch`.
Options marked ``affects_code`` change what we generate and therefore enter the cache key; the rest
(where files go, how loudly we log) must never split the cache.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass, field, fields
from typing import Any, Iterator


def _env(name: str, default: Any, kind: type) -> Any:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if kind is bool:
        return raw.strip().lower() not in ("0", "false", "no", "off")
    if kind is int:
        return int(raw)
    return raw


def _opt(default: Any, env: str | None, doc: str, affects_code: bool, choices: tuple = ()) -> Any:
    return field(default=default, metadata={"env": env, "doc": doc, "affects_code": affects_code,
                                            "choices": choices})


@dataclass
class Config:
    target: str = _opt("trn2", "NEURON_INDUCTOR_TARGET", "hardware generation to compile for",
                       True, ("trn1", "trn2"))
    fallback: str = _opt("warn", "NEURON_INDUCTOR_FALLBACK",
                         "what an op without a lowering does: 'warn' (eager ATen, logged once per "
                         "graph), 'silent' (eager ATen, counted only) or 'error'", True,
                         ("warn", "silent", "error"))
    fusion: bool = _opt(True, "NEURON_INDUCTOR_FUSION", "fuse ops into shared kernels", True)
    free_chunk: int = _opt(2048, "NEURON_INDUCTOR_FREE_CHUNK",
                           "largest free-axis chunk (elements per partition) of a pointwise tile", True)
    runtime: str = _opt("auto", "NEURON_INDUCTOR_RUNTIME",
                        "'auto' (device when the NKI toolchain and a Trainium are present, else the "
                        "simulator), 'simulator' or 'device'", False, ("auto", "simulator", "device"))
    debug_dir: str | None = _opt(None, "NEURON_INDUCTOR_DEBUG_DIR",
                                 "write each compiled graph's passes, IR, kernels and wrapper here",
                                 False)
    cache: bool = _opt(True, "NEURON_INDUCTOR_CACHE", "use the on-disk compile cache", False)
    cache_dir: str | None = _opt(None, "NEURON_INDUCTOR_CACHE_DIR",
                                 "compile cache directory (default: the user cache dir)", False)
    cache_max_bytes: int = _opt(10 * 1024**3, "NEURON_INDUCTOR_CACHE_MAX_BYTES",
                                "size cap of the on-disk cache; least recently used entries go first",
                                False)
    cache_lock_timeout: int = _opt(600, "NEURON_INDUCTOR_CACHE_LOCK_TIMEOUT",
                                   "seconds to wait for another process compiling the same graph",
                                   False)
    verify_ir: bool = _opt(True, "NEURON_INDUCTOR_VERIFY_IR", "run the IR verifier after lowering",
                           False)

    @classmethod
    def from_env(cls) -> "Config":
        kw = {}
        for f in fields(cls):
            env = f.metadata["env"]
            if env:
                kind = type(f.default) if f.default is not None else str
                kw[f.name] = _env(env, f.default, kind)
        cfg = cls(**kw)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        for f in fields(self):
            choices = f.metadata["choices"]
            if choices and getattr(self, f.name) not in choices:
                raise ValueError(f"neuron_inductor option {f.name}={getattr(self, f.name)!r} is not "
                                 f"one of {list(choices)}")

    def replace(self, **options: Any) -> "Config":
        """A copy with ``options`` applied; unknown names are a clear error listing the valid ones."""
        valid = {f.name for f in fields(self)}
        unknown = sorted(set(options) - valid)
        if unknown:
            raise ValueError(f"unknown neuron_inductor option(s) {unknown}; valid options: "
                             f"{sorted(valid)}")
        cfg = dataclasses.replace(self, **options)
        cfg.validate()
        return cfg

    def code_affecting(self) -> dict[str, Any]:
        """The snapshot that enters the cache key."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.metadata["affects_code"]}

    @staticmethod
    def describe() -> dict[str, str]:
        return {f.name: f.metadata["doc"] for f in fields(Config)}


_current: Config | None = None


def get_config() -> Config:
    """The active configuration (environment defaults, then any :func:`patch` in force)."""
    global _current
    if _current is None:
        _current = Config.from_env()
    return _current


@contextlib.contextmanager
def patch(**options: Any) -> Iterator[Config]:
    """Temporarily change options, e.g. ``with config.patch(fallback="error"): ...``."""
    global _current
    old = get_config()
    _current = old.replace(**options)
    try:
        yield _current
    finally:
        _current = old


def reset() -> None:
    """Re-read the environment (tests that change variables call this)."""
    global _current
    _current = None
