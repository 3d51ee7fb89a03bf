"""Which NKI generated kernels run on: the device through TorchNeuron, or the built-in simulator.

Generated kernel modules start with ``from neuron_inductor.runtime.nki import nki, nl, nisa``.  The
names are resolved lazily by the module ``__getattr__`` on every import, so ``config.runtime`` (and
``config.patch(runtime=...)``) in force when a kernel module is loaded decides:

* ``"simulator"``: always :mod:`neuron_inductor.runtime.sim`;
* ``"device"``: the NKI 0.3+ package ``nki`` on a NeuronCore through TorchNeuron (``torch_neuronx``,
  the ``neuron`` PrivateUse1 device); when that runtime is not usable this is a
  :class:`RuntimeUnavailable` (a configuration error naming what is missing), never a silent
  fallback and never a cache problem;
* ``"auto"``: the device only when the device runtime is really usable, else the simulator.

"Usable" is checked, not assumed (:func:`probe`): a Trainium host (the package's one detection,
:func:`neuron_inductor.autoselect.host_kind`), ``torch_neuronx`` imports, its device module reports a
``neuron`` device (``torch.neuron.is_available()``, per the TorchNeuron page "torch.neuron and
torch.accelerator reference"), and ``nki`` imports with the ``nki.jit`` / ``nki.language`` /
``nki.isa`` our kernels use. The classic ``neuronxcc.nki`` API does not count: our kernels do not run
on it. How a kernel call then reaches the NeuronCore is :mod:`neuron_inductor.runtime.device`.
:func:`explain` says which path runs and why (``neuron-inductor doctor``).
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from neuron_inductor import config

#: the NKI package generated kernels need (NKI 0.3+, the ``nki`` top-level package)
TOOLCHAIN = "nki"
CLASSIC = "neuronxcc.nki"
#: TorchNeuron, the PyTorch backend that owns the ``neuron`` device
TORCH_NEURONX = "torch_neuronx"
DEVICE_TYPE = "neuron"


class RuntimeUnavailable(RuntimeError):
    """``runtime='device'`` was asked for on a machine whose device runtime is not usable: a
    configuration error (never an internal error, never a reason to quarantine a cache entry)."""


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def device_present() -> bool:
    """Whether this is a Trainium host (the package's one host detection)."""
    from neuron_inductor.autoselect import host_kind

    return host_kind() is not None


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:200]


def _torch_neuronx_problem() -> str | None:
    """None when ``torch_neuronx`` imports and reports a ``neuron`` device, else what is wrong."""
    if not _importable(TORCH_NEURONX):
        return "TorchNeuron (`import torch_neuronx`: not installed)"
    try:
        importlib.import_module(TORCH_NEURONX)
    except Exception as e:  # a broken install is a fact to report, not a crash
        return f"a working TorchNeuron (`import torch_neuronx` failed: {_short(e)})"
    import torch

    mod = getattr(torch, DEVICE_TYPE, None)
    try:
        available = bool(mod.is_available()) and int(mod.device_count()) > 0
    except Exception as e:
        return f"a neuron device (torch.neuron.is_available() failed: {_short(e)})"
    if not available:
        return "a neuron device (torch.neuron.is_available() is False: no NeuronCore visible to TorchNeuron)"
    return None


def _nki_problem() -> str | None:
    """None when the NKI 0.3+ package imports with what generated kernels call, else what is wrong."""
    if not _importable(TOOLCHAIN):
        extra = (f"; classic {CLASSIC} is installed but generated kernels use the NKI 0.3+ API"
                 if _importable(CLASSIC) else "")
        return f"an NKI 0.3+ toolchain (`import nki`: not installed{extra})"
    try:
        mod = importlib.import_module(TOOLCHAIN)
        nl = importlib.import_module(f"{TOOLCHAIN}.language")
        nisa = importlib.import_module(f"{TOOLCHAIN}.isa")
    except Exception as e:
        return f"a working NKI toolchain (`import nki` failed: {_short(e)})"
    missing = [n for m, names in ((mod, ("jit",)), (nl, ("ndarray", "shared_hbm", "sbuf")),
                                  (nisa, ("dma_copy", "tensor_tensor"))) for n in names
               if not hasattr(m, n)]
    if missing:
        return f"a working NKI toolchain (`nki` lacks {', '.join(missing)}: not the NKI 0.3+ API)"
    try:
        def _probe_kernel(a):  # wrapped, never traced or run: nki.jit compiles on first call
            return a
        mod.jit(_probe_kernel)
    except Exception as e:
        return f"a working NKI toolchain (nki.jit failed on a plain function: {_short(e)})"
    return None


@dataclass(frozen=True)
class Probe:
    """What the device runtime needs and what this machine lacks of it (empty: usable)."""
    host: str | None
    missing: tuple[str, ...] = field(default=())

    @property
    def usable(self) -> bool:
        return not self.missing


def toolchain_problems() -> tuple[str, ...]:
    """What is missing of TorchNeuron and NKI (each checked by importing and asking it)."""
    return tuple(p for p in (_torch_neuronx_problem(), _nki_problem()) if p)


@functools.lru_cache(maxsize=1)
def probe() -> Probe:
    """Checked once per process (``reset_probe`` forgets it). Off a Trainium host nothing is imported."""
    from neuron_inductor.autoselect import host_kind

    if not device_present():
        return Probe(None, ("a Trainium host (neuron_inductor.autoselect.detect found none)",))
    return Probe(host_kind(), toolchain_problems())


def reset_probe() -> None:
    probe.cache_clear()


def explain(runtime: str | None = None) -> dict[str, str]:
    """``{"mode": "device" | "simulator" | "unavailable", "reason": ...}`` for ``runtime``."""
    runtime = runtime or config.get_config().runtime
    if runtime == "simulator":
        return {"mode": "simulator", "reason": "runtime='simulator'"}
    p = probe()
    if p.usable:
        return {"mode": "device", "reason": f"runtime={runtime!r} on a {p.host} host with TorchNeuron, a "
                "neuron device and NKI: kernels are called on `neuron` tensors through nki.jit, "
                "declared fallbacks run as ATen ops on the neuron device"}
    if runtime == "device":
        return {"mode": "unavailable", "reason": "neuron_inductor: runtime='device' needs "
                + " and ".join(p.missing) + "; set NEURON_INDUCTOR_RUNTIME=auto (or simulator) to "
                "run on the built-in simulator"}
    return {"mode": "simulator", "reason": "runtime='auto', device runtime not usable, missing: "
            + "; ".join(p.missing)}


def backend(runtime: str | None = None) -> str:
    """``"device"`` or ``"simulator"`` for ``runtime`` (default: ``config.runtime``)."""
    e = explain(runtime)
    if e["mode"] == "unavailable":
        raise RuntimeUnavailable(e["reason"])
    return e["mode"]


def _load_real() -> tuple[Any, ModuleType, ModuleType]:
    from .device import DeviceNki

    mod = importlib.import_module(TOOLCHAIN)
    nl, nisa = importlib.import_module(f"{TOOLCHAIN}.language"), importlib.import_module(f"{TOOLCHAIN}.isa")
    return DeviceNki(mod), nl, nisa


def _load_sim() -> tuple[Any, ModuleType, ModuleType]:
    from neuron_inductor.runtime import sim

    return sim.nki, sim.nl, sim.nisa


def select(runtime: str | None = None) -> tuple[Any, ModuleType, ModuleType]:
    """The ``(nki, nl, nisa)`` triple for ``runtime`` (default: ``config.runtime``)."""
    if backend(runtime) == "device":
        return _load_real()
    return _load_sim()


def is_simulator(runtime: str | None = None) -> bool:
    return backend(runtime) == "simulator"


def __getattr__(name: str) -> Any:
    if name in ("nki", "nl", "nisa"):
        return dict(zip(("nki", "nl", "nisa"), select()))[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
