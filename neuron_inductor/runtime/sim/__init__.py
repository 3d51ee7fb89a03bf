"""The built-in NKI simulator: the ``nki`` / ``nl`` / ``nisa`` subset we emit, on numpy.

Model (mirrors the official ``nki.simulate``, plus capacity checks):

* A kernel call (``nki.jit``) wraps each array argument, without copying, as a flat HBM tensor and
  runs the Python body *eagerly, in program order*; every ``nisa`` instruction computes immediately
  on numpy.  No scheduling, no timing: counters (DMA bytes, instructions per engine) and an optional
  instruction trace stand in for performance (``counters()``, ``record_trace()``).
* Tiles are numpy arrays in their real dtype (bf16 via ml_dtypes); engines compute in fp32 and cast
  on write.  Fresh allocations hold NaN (ints: the dtype max) so reading unwritten memory shows.
* Hardware rules are enforced and every refusal is a :class:`SimulatorError` naming the rule, the
  tiles, the kernel and its source line: partition <= 128, tiles >= 2-D, a PSUM tile fits a 2 KiB
  bank and <= 8 banks live, SBUF bytes per partition within the target, matmul K/M/N limits and
  memories, reductions on free axes only, engine/memory legality, bounds of every HBM access and
  tile slice, outputs created at top level and fully written.
* Scopes: each iteration of ``nl.affine_range`` & co is a scope; its tiles are released when the
  iteration ends (capacity reflects what is live) and using them afterwards is refused (``scope``).

Modules: tensor.py (allocations, views, access patterns), language.py (``nl``), isa.py (``nisa``),
namespace.py (the ``nl`` / ``nisa`` objects kernels get: the allowlisted names only),
jit.py (kernel calls and torch/numpy conversion), state.py (scopes, limits, accounting),
numerics.py (ALU ops and activation functions), dtypes.py, counters.py, errors.py.
"""
from __future__ import annotations

from typing import Any

from . import isa as _isa
from . import language as _language
from .counters import (Counters, TraceRecord, counters, last_call_counters, record_trace,
                       reset_counters)
from .errors import SimulatorError
from .jit import SimKernel, jit, simulate
from .namespace import Namespace
from .state import current_limits, override_limits

#: what kernels see: only the allowlisted names (the modules themselves stay internal)
nl = Namespace("nl", _language)
nisa = Namespace("nisa", _isa)


class _Nki:
    """The ``nki`` namespace: ``nki.jit``, ``nki.simulate``, ``nki.language``, ``nki.isa``."""

    jit = staticmethod(jit)
    simulate = staticmethod(simulate)
    language = nl
    isa = nisa
    is_simulator = True

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"nki.{name} is not supported by the neuron_inductor NKI simulator")


nki = _Nki()

__all__ = ["nki", "nl", "nisa", "SimulatorError", "SimKernel", "Counters", "TraceRecord",
           "counters", "last_call_counters", "reset_counters", "record_trace", "override_limits",
           "current_limits", "jit", "simulate"]
