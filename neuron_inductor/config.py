"""Typed compiler options.

Every option has a default, an environment variable that overrides the default, and can be set per
``torch.compile`` call through ``options={...}`` or for a block of code with :func:`patch`.
Options marked ``affects_code`` change what we generate and therefore enter the cache key; the rest
(where files go, how loudly we log) must never split the cache.

Every value is checked where it enters (environment, ``options={...}``, :func:`patch`), so a wrong
type or value is a :class:`ConfigError` naming the option and what it accepts, never a failure deep
inside a compile. The rules:

- booleans: in ``options``/``patch`` only ``True``/``False`` (a string such as ``"no"`` is refused,
  not read as true); in environment variables ``1/true/yes/on`` and ``0/false/no/off`` in any case,
  anything else is an error;
- integers: Python ``int`` (not ``bool``, not ``float``) at or above the option's minimum; in
  environment variables a decimal integer;
- choices: one of the listed strings;
- paths: ``str`` or ``os.PathLike`` (stored as ``str``), or ``None`` for the default.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass, field, fields
from typing import Any, Iterator

from .target import TARGETS

#: environment-variable spellings of booleans (compared case-insensitively, surrounding blanks ignored)
ENV_TRUE = ("1", "true", "yes", "on")
ENV_FALSE = ("0", "false", "no", "off")


class ConfigError(ValueError):
    """A neuron_inductor option has the wrong type or value (a ``ValueError`` so callers that
    caught the old errors keep working)."""


def _opt(default: Any, env: str | None, doc: str, affects_code: bool, choices: tuple = (),
         minimum: int | None = None, kind: str | None = None) -> Any:
    """One option. ``kind`` ('bool', 'int', 'choice', 'path') defaults from the default value."""
    if kind is None:
        kind = ("choice" if choices else "bool" if isinstance(default, bool)
                else "int" if isinstance(default, int) else "path")
    return field(default=default, metadata={"env": env, "doc": doc, "affects_code": affects_code,
                                            "choices": choices, "minimum": minimum, "kind": kind})


def accepted(f: dataclasses.Field) -> str:
    """What option ``f`` accepts, in words (used by errors and ``describe``)."""
    md = f.metadata
    kind = md["kind"]
    if kind == "bool":
        return "True or False"
    if kind == "int":
        return "an int" + (f" >= {md['minimum']}" if md["minimum"] is not None else "")
    if kind == "choice":
        return "one of " + ", ".join(repr(c) for c in md["choices"])
    return "a path (str or os.PathLike) or None"


def check_value(f: dataclasses.Field, value: Any) -> Any:
    """``value`` normalised for option ``f`` (paths become ``str``), or a :class:`ConfigError`."""
    md = f.metadata
    kind = md["kind"]
    ok = False
    if kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "int":
        ok = (isinstance(value, int) and not isinstance(value, bool)
              and (md["minimum"] is None or value >= md["minimum"]))
    elif kind == "choice":
        ok = isinstance(value, str) and value in md["choices"]
    elif value is None or isinstance(value, (str, os.PathLike)):
        value = None if value is None else os.fspath(value)
        ok = isinstance(value, (str, type(None))) and value != ""
    if not ok:
        raise ConfigError(f"neuron_inductor option {f.name}={value!r} is invalid: expected "
                          f"{accepted(f)}")
    return value


def _from_env(f: dataclasses.Field, raw: str) -> Any:
    """Parse environment variable text for option ``f`` (then checked like any other value)."""
    kind = f.metadata["kind"]
    env = f.metadata["env"]
    word = raw.strip()
    if kind == "bool":
        if word.lower() in ENV_TRUE:
            return True
        if word.lower() in ENV_FALSE:
            return False
        raise ConfigError(f"environment variable {env}={raw!r} (option {f.name}) is invalid: "
                          f"expected one of {', '.join(ENV_TRUE + ENV_FALSE)} (any case)")
    if kind == "int":
        try:
            return int(word)
        except ValueError:
            raise ConfigError(f"environment variable {env}={raw!r} (option {f.name}) is invalid: "
                              f"expected {accepted(f)}") from None
    return word


@dataclass
class Config:
    target: str = _opt("trn2", "NEURON_INDUCTOR_TARGET", "hardware generation to compile for",
                       True, tuple(TARGETS))
    fallback: str = _opt("warn", "NEURON_INDUCTOR_FALLBACK",
                         "what an op without a lowering does: 'warn' (eager ATen, logged once per "
                         "graph), 'silent' (eager ATen, counted only) or 'error'", True,
                         ("warn", "silent", "error"))
    fusion: bool = _opt(True, "NEURON_INDUCTOR_FUSION", "fuse ops into shared kernels", True)
    free_chunk: int = _opt(2048, "NEURON_INDUCTOR_FREE_CHUNK",
                           "largest free-axis chunk (elements per partition) of a pointwise tile", True,
                           minimum=1)
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
                                False, minimum=0)
    cache_lock_timeout: int = _opt(600, "NEURON_INDUCTOR_CACHE_LOCK_TIMEOUT",
                                   "seconds to wait for another process compiling the same graph",
                                   False, minimum=0)
    verify_ir: bool = _opt(True, "NEURON_INDUCTOR_VERIFY_IR", "run the IR verifier after lowering",
                           False)

    @classmethod
    def from_env(cls) -> "Config":
        """Defaults overridden by the environment; a malformed variable is a :class:`ConfigError`."""
        kw = {}
        for f in fields(cls):
            raw = os.environ.get(f.metadata["env"]) if f.metadata["env"] else None
            if raw is not None and raw.strip() != "":
                kw[f.name] = _from_env(f, raw)
        cfg = cls(**kw)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Check (and normalise) every option; raises :class:`ConfigError` naming the first bad one."""
        for f in fields(self):
            object.__setattr__(self, f.name, check_value(f, getattr(self, f.name)))

    def replace(self, **options: Any) -> "Config":
        """A copy with ``options`` applied; unknown names are a clear error listing the valid ones."""
        valid = {f.name for f in fields(self)}
        unknown = sorted(set(options) - valid)
        if unknown:
            raise ConfigError(f"unknown neuron_inductor option(s) {unknown}; valid options: "
                             f"{sorted(valid)}")
        cfg = dataclasses.replace(self, **options)
        cfg.validate()
        return cfg

    def code_affecting(self) -> dict[str, Any]:
        """The snapshot that enters the cache key."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.metadata["affects_code"]}

    @staticmethod
    def describe() -> dict[str, str]:
        return {f.name: f"{f.metadata['doc']} ({accepted(f)}; env {f.metadata['env']})"
                for f in fields(Config)}


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


# ---------------------------------------------------------------------------- process-wide settings

#: Which compiler ``torch.compile(backend="neuron")`` means when TorchNeuron (``torch-neuronx``, whose
#: ``torch.compile`` backend has the same name) is installed too: ``torch_neuronx`` (the default:
#: AWS's documented backend keeps its documented name) or ``neuron_inductor``. Not a per-compile
#: option: it decides a name in torch's backend registry for the whole process (and which package
#: sets the default backend on a Trainium host). ``backend="neuron_inductor"`` is always this package.
NEURON_NAME_ENV = "NEURON_INDUCTOR_NEURON_BACKEND"
NEURON_NAME_CHOICES = ("torch_neuronx", "neuron_inductor")


def neuron_name_setting() -> str | None:
    """The value of :data:`NEURON_NAME_ENV` (None when unset); a :class:`ConfigError` when invalid."""
    raw = os.environ.get(NEURON_NAME_ENV, "").strip().lower()
    if not raw:
        return None
    if raw not in NEURON_NAME_CHOICES:
        raise ConfigError(f"environment variable {NEURON_NAME_ENV}={raw!r} is invalid: expected one of "
                          f"{', '.join(NEURON_NAME_CHOICES)}")
    return raw
