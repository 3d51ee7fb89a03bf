"""Instruction and DMA counters, and an optional instruction trace.

Benchmarks and the cost model read these instead of timing: every kernel call accumulates into a
per-call :class:`Counters` which is then added to a process-wide total.  The trace (a list of small
:class:`TraceRecord`) is only built while :func:`record_trace` is active, so normal runs pay one
truthiness test per instruction.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Iterator

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")


@dataclass
class Counters:
    kernel_calls: int = 0
    #: bytes moved, counted on the HBM side of each DMA
    dma_bytes_loaded: int = 0
    dma_bytes_stored: int = 0
    dma_transfers: int = 0
    #: instructions issued per engine (``dma`` counts DMA transfers)
    instructions: dict[str, int] = field(default_factory=lambda: {e: 0 for e in ENGINES})

    def add(self, other: "Counters") -> None:
        self.kernel_calls += other.kernel_calls
        self.dma_bytes_loaded += other.dma_bytes_loaded
        self.dma_bytes_stored += other.dma_bytes_stored
        self.dma_transfers += other.dma_transfers
        for k, v in other.instructions.items():
            self.instructions[k] = self.instructions.get(k, 0) + v

    def copy(self) -> "Counters":
        c = Counters()
        c.add(self)
        return c

    def as_dict(self) -> dict:
        return {"kernel_calls": self.kernel_calls, "dma_bytes_loaded": self.dma_bytes_loaded,
                "dma_bytes_stored": self.dma_bytes_stored, "dma_transfers": self.dma_transfers,
                "instructions": dict(self.instructions)}


@dataclass(frozen=True)
class TraceRecord:
    kernel: str
    engine: str
    op: str
    partitions: int
    #: elements per partition processed (for DMA: elements per partition row of the transfer)
    free: int
    #: dtype names of destination then sources
    dtypes: tuple[str, ...]
    #: HBM-side bytes of a DMA, else 0
    nbytes: int = 0
    #: memories of destination then sources ("sbuf", "psum", "hbm")
    memories: tuple[str, ...] = ()
    #: instruction-specific sizes: nc_matmul (K, M, N), nc_transpose (P, F)
    dims: tuple[int, ...] = ()


_total = Counters()
_last = Counters()
_sinks: list[list[TraceRecord]] = []


def counters() -> Counters:
    """Snapshot of the cumulative counters since the last :func:`reset_counters`."""
    return _total.copy()


def last_call_counters() -> Counters:
    """Counters of the most recent completed kernel call."""
    return _last.copy()


def reset_counters() -> None:
    global _total, _last
    _total = Counters()
    _last = Counters()


def finish_call(call: Counters) -> None:
    global _last
    _total.add(call)
    _last = call


@contextlib.contextmanager
def record_trace() -> Iterator[list[TraceRecord]]:
    """Collect a :class:`TraceRecord` per instruction executed inside the block."""
    sink: list[TraceRecord] = []
    _sinks.append(sink)
    try:
        yield sink
    finally:
        _sinks.remove(sink)


def tracing() -> bool:
    return bool(_sinks)


def emit(record: TraceRecord) -> None:
    for s in _sinks:
        s.append(record)
