"""``nl``: the nki.language subset the code generator emits, on the simulator.

Dtypes are numpy dtypes, buffers are small marker objects, loop helpers yield plain Python ints (and
drive the scope stack, see state.py), ALU ops and activation functions are :class:`numerics.Op`
objects passed to ``nisa`` instructions.  ``nl.ndarray`` allocates: SBUF/PSUM tiles are charged
against the target's capacity in the current scope and filled with NaN (ints: dtype max) so reads of
unwritten memory show; ``shared_hbm`` outputs must be created at kernel top level.
Any other attribute is an AttributeError naming the unsupported API.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Iterator

import numpy as np

from . import dtypes as _dt
from .errors import refuse
from .numerics import ALL_OPS as _OPS
from .state import current as _current, loop_range as _loop_range
from .tensor import Allocation as _Allocation, Tensor as _Tensor

float32 = _dt.float32
float16 = _dt.float16
int32 = _dt.int32
uint32 = _dt.uint32
int16 = _dt.int16
uint16 = _dt.uint16
int8 = _dt.int8
uint8 = _dt.uint8
bool_ = _dt.uint8


class _Buffer:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"nl.{self.name}"


sbuf = _Buffer("sbuf")
psum = _Buffer("psum")
hbm = _Buffer("hbm")
private_hbm = hbm
shared_hbm = _Buffer("shared_hbm")

tile_size = SimpleNamespace(pmax=128, psum_fmax=512, psum_bank_fmax=512, gemm_stationary_fmax=128,
                            gemm_moving_fmax=512, bn_stats_fmax=512)

# every contract op/activation: nl.add, nl.exp, ...
globals().update(_OPS)


def affine_range(*args: int) -> Iterator[int]:
    """Iterations without carried dependencies; each iteration is one tile scope."""
    return _loop_range(*args)


def sequential_range(*args: int) -> Iterator[int]:
    """Iterations with a carried dependency (same semantics here: eager, in order)."""
    return _loop_range(*args)


def static_range(*args: int) -> Iterator[int]:
    """Fully unrolled in NKI; the same eager loop here."""
    return _loop_range(*args)


def _buffer_name(buffer: Any) -> str:
    if buffer is None:
        return "sbuf"
    if isinstance(buffer, _Buffer):
        return buffer.name
    raise refuse("unsupported", f"buffer {buffer!r} is not one of nl.sbuf, nl.psum, nl.hbm, "
                 "nl.shared_hbm")


def ndarray(shape: Any, dtype: Any, *, buffer: Any = None, name: str = "") -> _Tensor:
    """Allocate an uninitialised tensor (NaN / int max filled)."""
    buf = _buffer_name(buffer)
    ctx = _current()
    try:
        shp = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    except (TypeError, ValueError):
        raise refuse("shape", f"shape {shape!r} must be a tuple of ints") from None
    d = _dt.normalize(dtype)
    if d is None:
        raise refuse("dtype", f"dtype {dtype!r} has no hardware type (supported: "
                     f"{list(_dt.ALL_NAMES)})")
    if any(s < 0 for s in shp):
        raise refuse("shape", f"negative size in shape {shp}")
    label = name or (ctx.next_name(buf) if ctx is not None else buf)
    if buf in ("sbuf", "psum"):
        if ctx is None:
            raise refuse("outside-kernel", f"nl.ndarray(buffer=nl.{buf}) may only be called inside "
                         "an @nki.jit kernel")
        if len(shp) < 2:
            raise refuse("tile-rank", f"on-chip tile {label} has shape {list(shp)}; SBUF/PSUM "
                         "tiles are at least 2-D (partition first): use (P, 1)")
        if shp[0] > ctx.limits.partitions:
            raise refuse("partition-limit", f"tile {label} has partition dimension {shp[0]}, "
                         f"exceeding the limit of {ctx.limits.partitions}")
    if buf == "shared_hbm" and ctx is not None and ctx.depth > 0:
        raise refuse("shared-hbm-top-level", f"shared_hbm tensor {label} must be created at "
                     "kernel top level, not inside a loop")
    data = np.full(shp, _dt.fill_value(d), dtype=d)
    alloc = _Allocation(label, buf, data, written=buf in ("hbm", "shared_hbm"))
    if buf in ("sbuf", "psum"):
        ctx.charge(alloc)
    return alloc.whole()


def zeros(shape: Any, dtype: Any, *, buffer: Any = None, name: str = "") -> _Tensor:
    """An allocation memset to zero (counted as one VectorE memset); not allowed in HBM."""
    if _buffer_name(buffer) in ("hbm", "shared_hbm"):
        raise refuse("hbm-init", "HBM tensors cannot have an init value")
    t = ndarray(shape, dtype, buffer=buffer, name=name)
    from .isa import memset
    memset(dst=t, value=0)
    return t


def program_id(axis: int = 0) -> int:
    return 0


def num_programs(axes: Any = None) -> int:
    return 1


def __getattr__(name: str) -> Any:
    if name == "bfloat16":  # loaded on first use: importing ml_dtypes is slow (see dtypes.py)
        globals()["bfloat16"] = d = _dt.bfloat16
        return d
    raise AttributeError(f"nl.{name} is not supported by the neuron_inductor NKI simulator "
                         "(see the NKI subset contract in neuron_inductor/runtime/sim)")
