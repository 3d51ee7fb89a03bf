"""Per-call kernel state: the scope stack, on-chip capacity accounting and limits.

A kernel call opens a :class:`KernelContext`.  It owns a stack of scopes: the kernel body is scope 0
and every iteration of ``nl.affine_range`` / ``sequential_range`` / ``static_range`` pushes a scope
that is popped when the iteration ends.  Tiles are charged to the scope they were allocated in
(SBUF bytes per partition, PSUM banks) and released with it, exactly as NKI scopes a tile to the
loop body that declares it; a released tile refuses any later use (rule ``scope``).  So capacity
checks see what is live *now*, not everything the kernel ever allocated.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from .counters import Counters, TraceRecord, emit, tracing
from .dtypes import NAMES
from .active import current, stack as _stack
from .errors import refuse

if TYPE_CHECKING:
    from neuron_inductor.target import Target

    from .tensor import Allocation


@dataclass(frozen=True)
class Limits:
    partitions: int
    sbuf_bytes_per_partition: int
    psum_bank_bytes: int
    psum_banks: int
    matmul_k_max: int
    matmul_m_max: int
    matmul_n_max: int


_overrides: dict[str, int] = {}


def kernel_target(name: str | None = None) -> "Target":
    """The target a kernel was compiled for (its module's ``PLATFORM_TARGET``), else the configured
    one (``config.target``: hand-written kernels that record none)."""
    from neuron_inductor import config
    from neuron_inductor.target import get_target

    return get_target(name or config.get_config().target)


def current_limits(target: "Target | str | None" = None) -> Limits:
    """Limits of ``target`` (default: the configured one), with any :func:`override_limits`."""
    from neuron_inductor.target import Target

    t = target if isinstance(target, Target) else kernel_target(target)
    base = dict(partitions=t.partitions, sbuf_bytes_per_partition=t.sbuf_bytes_per_partition,
                psum_bank_bytes=t.psum_bank_bytes, psum_banks=t.psum_banks,
                matmul_k_max=t.matmul_k_max, matmul_m_max=t.matmul_m_max,
                matmul_n_max=t.matmul_n_max)
    base.update(_overrides)
    return Limits(**base)


@contextlib.contextmanager
def override_limits(**limits: int) -> Iterator[None]:
    """Temporarily change capacity limits (tests use a small SBUF to provoke overflow cheaply)."""
    unknown = set(limits) - set(Limits.__dataclass_fields__)
    if unknown:
        raise ValueError(f"unknown simulator limit(s) {sorted(unknown)}")
    saved = dict(_overrides)
    _overrides.update(limits)
    try:
        yield
    finally:
        _overrides.clear()
        _overrides.update(saved)


class KernelContext:
    """State of one running kernel call."""

    def __init__(self, name: str, code: Any, target: str | None = None) -> None:
        self.name = name
        self.code = code
        #: the rules and limits checked are those of the target the kernel was compiled for
        self.target = kernel_target(target)
        self.limits = current_limits(self.target)
        self.scopes: list[list["Allocation"]] = [[]]
        self.sbuf_live = 0
        self.psum_banks_live = 0
        self.counters = Counters(kernel_calls=1)
        self.finished = False
        self._serial = 0

    # --- naming ---------------------------------------------------------------------------------
    def next_name(self, buffer: str) -> str:
        self._serial += 1
        return f"{buffer}{self._serial}"

    # --- scopes ---------------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        return len(self.scopes) - 1

    def push_scope(self) -> int:
        self.scopes.append([])
        return len(self.scopes) - 1

    def pop_scope(self, level: int) -> None:
        """Release every tile of scope ``level`` (and of any scope still open above it)."""
        if self.finished:
            return
        while len(self.scopes) > level and len(self.scopes) > 0:
            for alloc in self.scopes.pop():
                self._release(alloc)

    def finish(self) -> None:
        self.pop_scope(0)
        self.finished = True

    # --- capacity -------------------------------------------------------------------------------
    def charge(self, alloc: "Allocation") -> None:
        """Account a new on-chip tile in the innermost scope, refusing what does not fit."""
        lim = self.limits
        if alloc.buffer == "psum":
            if alloc.bytes_pp > lim.psum_bank_bytes:
                raise refuse("psum-capacity",
                             f"PSUM tile needs {alloc.bytes_pp} bytes per partition; a PSUM tile "
                             f"must fit in one {lim.psum_bank_bytes}-byte bank", alloc.whole(),
                             allocating=True)
            banks = -(-alloc.bytes_pp // lim.psum_bank_bytes)
            if self.psum_banks_live + banks > lim.psum_banks:
                raise refuse("psum-capacity",
                             f"allocating this PSUM tile makes {self.psum_banks_live + banks} banks "
                             f"live; PSUM has {lim.psum_banks}", alloc.whole(),
                             allocating=True)
            alloc.banks = banks
            self.psum_banks_live += banks
        else:
            if self.sbuf_live + alloc.bytes_pp > lim.sbuf_bytes_per_partition:
                raise refuse("sbuf-capacity",
                             f"live SBUF would be {self.sbuf_live + alloc.bytes_pp} bytes per "
                             f"partition (this tile {alloc.bytes_pp}); the target allows "
                             f"{lim.sbuf_bytes_per_partition}", alloc.whole(),
                             allocating=True)
            self.sbuf_live += alloc.bytes_pp
        self.scopes[-1].append(alloc)

    def _release(self, alloc: "Allocation") -> None:
        if alloc.released:
            return
        alloc.released = True
        if alloc.buffer == "psum":
            self.psum_banks_live -= alloc.banks
        elif alloc.buffer == "sbuf":
            self.sbuf_live -= alloc.bytes_pp
        alloc.data = None  # a released tile keeps no memory; any read would be a bug anyway

    # --- counting -------------------------------------------------------------------------------
    def count(self, engine: str, op: str, partitions: int, free: int, operands: tuple = (),
              nbytes: int = 0, store: bool = False, dims: tuple[int, ...] = ()) -> None:
        """Count one instruction; ``operands`` (destination first) only feed the trace."""
        c = self.counters
        c.instructions[engine] = c.instructions.get(engine, 0) + 1
        if engine == "dma":
            c.dma_transfers += 1
            if store:
                c.dma_bytes_stored += nbytes
            else:
                c.dma_bytes_loaded += nbytes
        if tracing():
            dtypes = tuple(NAMES.get(t.dtype, str(t.dtype)) for t in operands)
            memories = tuple(t.memory for t in operands)
            emit(TraceRecord(self.name, engine, op, int(partitions), int(free), dtypes, int(nbytes),
                             memories, dims))


def require_kernel(api: str) -> KernelContext:
    ctx = current()
    if ctx is None:
        raise refuse("outside-kernel", f"{api} may only be called inside an @nki.jit kernel")
    return ctx


@contextlib.contextmanager
def kernel_context(name: str, code: Any, target: str | None = None) -> Iterator[KernelContext]:
    ctx = KernelContext(name, code, target)
    _stack().append(ctx)
    try:
        yield ctx
    finally:
        _stack().pop()
        ctx.finish()


def loop_range(*args: int) -> Iterator[int]:
    """The body of nl.affine_range & co: yields ints, one scope per iteration."""
    ctx = current()
    r = range(*[int(a) for a in args])
    if ctx is None:
        yield from r
        return
    for i in r:
        level = ctx.push_scope()
        try:
            yield i
        finally:
            ctx.pop_scope(level)
