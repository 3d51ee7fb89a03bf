"""Which NKI generated kernels run on: the real toolchain on a NeuronCore, or the built-in simulator.

Generated kernel modules start with ``from neuron_inductor.runtime.nki import nki, nl, nisa``.  The
names are resolved lazily by the module ``__getattr__`` on every import, so ``config.runtime`` (and
``config.patch(runtime=...)``) in force when a kernel module is loaded decides:

* ``"simulator"``: always :mod:`neuron_inductor.runtime.sim`;
* ``"device"``: the real NKI 0.3+ package ``nki`` (destination-first ``nisa`` calls, ``.ap`` access
  patterns: the API our kernels are written in) on a Trainium host; anything else is a clear
  :class:`RuntimeError`, never a silent fallback;
* ``"auto"``: the device when both are present, else the simulator.

The classic ``neuronxcc.nki`` API is refused: our kernels do not run on it (and using it inside a
kernel is a compile error from NKI 0.4). Whether this is a Trainium host is decided by the one
detection the package has, :func:`neuron_inductor.autoselect.host_kind` (PCI ids, driver sysfs,
``/dev/neuron*``, or ``NEURON_INDUCTOR_HOST``). How a kernel call then reaches the NeuronCore (device
tensors, compile target, logical cores, kernels without arguments, 64-bit values) is
:mod:`neuron_inductor.runtime.device`. :func:`explain` says which path runs and why (``doctor``).
"""
from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Any

from neuron_inductor import config

#: the NKI package generated kernels need (NKI 0.3+, the ``nki`` top-level package)
TOOLCHAIN = "nki"
CLASSIC = "neuronxcc.nki"


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def device_present() -> bool:
    """Whether this is a Trainium host (the package's one host detection)."""
    from neuron_inductor.autoselect import host_kind

    return host_kind() is not None


def _find_real() -> str | None:
    """Module path of an importable NKI 0.3+ toolchain (``nki``); classic ``neuronxcc.nki`` does not count."""
    return TOOLCHAIN if _importable(TOOLCHAIN) else None


def _load_real(name: str) -> tuple[Any, ModuleType, ModuleType]:
    from .device import DeviceNki

    mod = importlib.import_module(name)
    nl, nisa = importlib.import_module(f"{name}.language"), importlib.import_module(f"{name}.isa")
    return DeviceNki(mod), nl, nisa


def _load_sim() -> tuple[Any, ModuleType, ModuleType]:
    from neuron_inductor.runtime import sim

    return sim.nki, sim.nl, sim.nisa


def explain(runtime: str | None = None) -> dict[str, str]:
    """``{"mode": "device" | "simulator" | "unavailable", "reason": ...}`` for ``runtime``."""
    runtime = runtime or config.get_config().runtime
    if runtime == "simulator":
        return {"mode": "simulator", "reason": "runtime='simulator'"}
    real, present = _find_real(), device_present()
    facts = []
    if real is None:
        facts.append("an NKI 0.3+ toolchain (`import nki`)" + (
            f"; classic {CLASSIC} is installed but generated kernels use the NKI 0.3+ API"
            if _importable(CLASSIC) else ""))
    if not present:
        facts.append("a Neuron device (neuron_inductor.autoselect.detect found no Trainium host)")
    if not facts:
        return {"mode": "device", "reason": f"runtime={runtime!r}, `{TOOLCHAIN}` importable and a Trainium "
                "host: kernels run through nki.jit with torch tensors on the XLA device, kernel[1], "
                "NEURON_PLATFORM_TARGET_OVERRIDE from each module's PLATFORM_TARGET"}
    if runtime == "device":
        return {"mode": "unavailable", "reason": "neuron_inductor: runtime='device' needs " + " and ".join(facts)
                + "; set NEURON_INDUCTOR_RUNTIME=simulator (or 'auto') to run on the built-in simulator"}
    return {"mode": "simulator", "reason": "runtime='auto', missing: " + "; ".join(facts)}


def backend(runtime: str | None = None) -> str:
    """``"device"`` or ``"simulator"`` for ``runtime`` (default: ``config.runtime``)."""
    e = explain(runtime)
    if e["mode"] == "unavailable":
        raise RuntimeError(e["reason"])
    return e["mode"]


def select(runtime: str | None = None) -> tuple[Any, ModuleType, ModuleType]:
    """The ``(nki, nl, nisa)`` triple for ``runtime`` (default: ``config.runtime``)."""
    if backend(runtime) == "device":
        return _load_real(_find_real())  # type: ignore[arg-type]
    return _load_sim()


def is_simulator(runtime: str | None = None) -> bool:
    return backend(runtime) == "simulator"


def __getattr__(name: str) -> Any:
    if name in ("nki", "nl", "nisa"):
        return dict(zip(("nki", "nl", "nisa"), select()))[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
