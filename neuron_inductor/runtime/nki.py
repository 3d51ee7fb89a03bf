"""Which NKI generated kernels run on: the real toolchain or the built-in simulator.

Generated kernel modules start with ``from neuron_inductor.runtime.nki import nki, nl, nisa``.  The
names are resolved lazily by the module ``__getattr__`` on every import, so ``config.runtime`` (and
``config.patch(runtime=...)``) in force when a kernel module is loaded decides:

* ``"simulator"``: always :mod:`neuron_inductor.runtime.sim`;
* ``"device"``: the real ``nki`` package; without a Neuron device or an importable toolchain this is
  a clear :class:`RuntimeError` (never a silent fallback);
* ``"auto"``: the real package when it is importable *and* a Neuron device node (``/dev/neuron*``)
  exists, else the simulator.
"""
from __future__ import annotations

import glob
import importlib
import importlib.util
from types import ModuleType
from typing import Any

from neuron_inductor import config

#: device nodes whose presence means a Neuron device is attached
DEVICE_GLOB = "/dev/neuron*"


def device_present() -> bool:
    return bool(glob.glob(DEVICE_GLOB))


def _find_real() -> str | None:
    """Module path of an importable NKI toolchain: ``nki`` (0.2+) or classic ``neuronxcc.nki``."""
    for name in ("nki", "neuronxcc.nki"):
        try:
            if importlib.util.find_spec(name) is not None:
                return name
        except (ImportError, ValueError):
            continue
    return None


def _load_real(name: str) -> tuple[Any, ModuleType, ModuleType]:
    mod = importlib.import_module(name)
    return (mod, importlib.import_module(f"{name}.language"), importlib.import_module(f"{name}.isa"))


def _load_sim() -> tuple[Any, ModuleType, ModuleType]:
    from neuron_inductor.runtime import sim

    return sim.nki, sim.nl, sim.nisa


def backend(runtime: str | None = None) -> str:
    """``"device"`` or ``"simulator"`` for ``runtime`` (default: ``config.runtime``)."""
    runtime = runtime or config.get_config().runtime
    if runtime == "simulator":
        return "simulator"
    real = _find_real()
    present = device_present()
    if runtime == "device":
        if real is None or not present:
            missing = [m for m, ok in (("an importable NKI toolchain (nki / neuronxcc.nki)",
                                        real is not None),
                                       (f"a Neuron device ({DEVICE_GLOB})", present)) if not ok]
            raise RuntimeError("neuron_inductor: runtime='device' needs " + " and ".join(missing)
                               + "; set NEURON_INDUCTOR_RUNTIME=simulator (or 'auto') to run on "
                               "the built-in simulator")
        return "device"
    return "device" if (real is not None and present) else "simulator"


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
