"""Tensors of the simulator: allocations, views and HBM access patterns.

* :class:`Allocation` is one buffer (an HBM span, an SBUF or a PSUM tile) holding a numpy array in its
  real dtype, plus bookkeeping: scope/release state, capacity charge, and for kernel-created HBM
  outputs a ``written`` mask (one bool per element) so unwritten outputs can be refused.
* :class:`Tensor` is a rectangular view of an allocation: ``t[0:128, 0:512]`` with int bounds
  (ints keep a size-1 dim, so tiles stay >= 2-D); steps are allowed on free dims only; bounds are
  checked (no silent numpy clipping, no negative indexing).
* :class:`AccessPattern` is ``hbm.ap(pattern=[[stride, count], ...], offset=, vector_offset=,
  indirect_dim=0)``: an as_strided view over the flat tensor, or with ``vector_offset`` a row
  gather/scatter whose partition term is ``idx[p] * row``, ``row`` being the elements right of dim 0
  of the tensor's shape as the hardware takes it (``x.reshape((rows, row)).ap(...)``; vectorised with
  numpy fancy indexing).
"""
from __future__ import annotations

import copy
import operator
from typing import Any

import numpy as np

from . import dtypes as dt
from .errors import refuse


class Allocation:
    __slots__ = ("name", "buffer", "shape", "dtype", "data", "flat", "released", "written",
                 "bytes_pp", "banks", "mm_written", "other_written", "param_index")

    def __init__(self, name: str, buffer: str, data: np.ndarray, written: bool = False,
                 param_index: int | None = None) -> None:
        self.name = name
        self.buffer = buffer          # "hbm" | "shared_hbm" | "sbuf" | "psum"
        self.shape = tuple(data.shape)
        self.dtype = data.dtype
        self.data = data
        self.flat = data.reshape(-1) if buffer in ("hbm", "shared_hbm") else None
        self.released = False
        #: per-element written mask of kernel-created HBM tensors (None: not tracked)
        self.written = np.zeros(data.size, dtype=bool) if written else None
        self.bytes_pp = int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize \
            if buffer in ("sbuf", "psum") else 0
        self.banks = 0
        #: PSUM elements already written by a matmul (for accumulate=None auto-detection)
        self.mm_written: np.ndarray | None = None
        #: PSUM elements last written by a non-matmul instruction (memset, tensor_copy, ...): a
        #: matmul may not accumulate onto them (rule matmul-accumulate-nonmatmul)
        self.other_written: np.ndarray | None = None
        self.param_index = param_index

    @property
    def dtype_name(self) -> str:
        return dt.NAMES.get(self.dtype, str(self.dtype))

    @property
    def on_chip(self) -> bool:
        return self.buffer in ("sbuf", "psum")

    @property
    def memory(self) -> str:
        return "hbm" if self.buffer in ("hbm", "shared_hbm") else self.buffer

    def whole(self) -> "Tensor":
        return Tensor(self, tuple((0, 1, n) for n in self.shape))


def _index(v: Any) -> int:
    return operator.index(v)


class Tensor:
    """A view ``alloc[start : start + step*count : step, ...]``; dims are (start, step, count)."""

    __slots__ = ("alloc", "dims", "_array")

    def __init__(self, alloc: Allocation, dims: tuple[tuple[int, int, int], ...]) -> None:
        self.alloc = alloc
        self.dims = dims
        self._array: np.ndarray | None = None

    # --- metadata -------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(c for _, _, c in self.dims)

    @property
    def dtype(self) -> np.dtype:
        return self.alloc.dtype

    @property
    def buffer(self) -> str:
        return self.alloc.buffer

    @property
    def memory(self) -> str:
        return self.alloc.memory

    @property
    def name(self) -> str:
        return self.alloc.name

    @property
    def ndim(self) -> int:
        return len(self.dims)

    @property
    def itemsize(self) -> int:
        return self.alloc.dtype.itemsize

    @property
    def partitions(self) -> int:
        return self.dims[0][2]

    @property
    def free_size(self) -> int:
        n = 1
        for _, _, c in self.dims[1:]:
            n *= c
        return n

    def region_text(self) -> str:
        parts = []
        for s, st, c in self.dims:
            parts.append(f"{s}:{s + st * c}" + (f":{st}" if st != 1 else ""))
        return "[" + ", ".join(parts) + "]"

    def __repr__(self) -> str:
        return f"Tensor({self.alloc.name}{self.region_text()}, {self.alloc.buffer}, " \
               f"{self.alloc.dtype_name})"

    # --- data -----------------------------------------------------------------------------------
    def _slices(self) -> tuple[slice, ...]:
        return tuple(slice(s, s + st * (c - 1) + 1 if c else s, st) for s, st, c in self.dims)

    @property
    def array(self) -> np.ndarray:
        """The numpy view (checks the tile is still in scope)."""
        if self.alloc.released:
            raise refuse("scope", f"tile {self.alloc.name} is used after the loop iteration (scope) "
                         "that allocated it ended", self)
        if self._array is None:
            self._array = self.alloc.data[self._slices()]
        return self._array

    def mark_written(self) -> None:
        w = self.alloc.written
        if w is not None:
            w.reshape(self.alloc.shape)[self._slices()] = True

    # --- slicing --------------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> "Tensor":
        if self.alloc.released:
            raise refuse("scope", f"tile {self.alloc.name} is sliced after its scope ended", self)
        if not isinstance(key, tuple):
            key = (key,)
        if len(key) > len(self.dims):
            raise refuse("out-of-bounds", f"{len(key)} indices for a {len(self.dims)}-D tensor", self)
        dims = list(self.dims)
        for axis, k in enumerate(key):
            start, step, count = dims[axis]
            if isinstance(k, slice):
                a = 0 if k.start is None else _index(k.start)
                b = count if k.stop is None else _index(k.stop)
                st = 1 if k.step is None else _index(k.step)
            elif k is Ellipsis:
                raise refuse("unsupported", "Ellipsis indexing is not supported", self)
            else:
                try:
                    a = _index(k)
                except TypeError:
                    raise refuse("unsupported", f"index {k!r} on axis {axis}: only ints and "
                                 "slices with int bounds are supported", self) from None
                b, st = a + 1, 1
            if st < 1 or (st != 1 and axis == 0 and self.alloc.on_chip):
                raise refuse("partition-stride" if axis == 0 else "out-of-bounds",
                             f"step {st} on axis {axis} is not allowed (partition axis takes only "
                             "contiguous ranges; steps must be positive)", self)
            if a < 0 or b > count or b < a:
                raise refuse("out-of-bounds", f"index {a}:{b} on axis {axis} is outside "
                             f"[0, {count}) of the tensor", self)
            n = (b - a + st - 1) // st
            dims[axis] = (start + a * step, step * st, n)
        return Tensor(self.alloc, tuple(dims))

    def reshape(self, shape: Any) -> "Tensor":
        """``NkiTensor.reshape`` of a whole HBM tensor: the same storage seen with another shape
        (what an indirect DMA takes its row stride from)."""
        if self.alloc.on_chip:
            raise refuse("unsupported", "reshape is simulated for HBM tensors only", self)
        if self.dims != tuple((0, 1, n) for n in self.alloc.shape):
            raise refuse("unsupported", "reshape of a sliced HBM view", self)
        try:
            shape = tuple(_index(n) for n in shape)
        except TypeError:
            raise refuse("unsupported", f"reshape to {shape!r}: expected a tuple of ints", self) from None
        if any(n < 0 for n in shape) or int(np.prod(shape, dtype=np.int64)) != self.alloc.flat.size:
            raise refuse("shape", f"reshape of {self.alloc.flat.size} elements to {list(shape)}", self)
        alias = copy.copy(self.alloc)  # shares data, flat and the written mask
        alias.data = self.alloc.data.reshape(shape)
        alias.shape = shape
        return Tensor(alias, tuple((0, 1, n) for n in shape))

    # --- access patterns ------------------------------------------------------------------------
    def ap(self, pattern: Any, offset: int = 0, vector_offset: "Tensor | None" = None,
           indirect_dim: int = 0, scalar_offset: Any = None) -> "AccessPattern":
        if self.alloc.on_chip:
            raise refuse("unsupported", ".ap() is supported on HBM tensors only", self)
        if scalar_offset is not None:
            raise refuse("unsupported", ".ap(scalar_offset=) is not supported", self)
        try:
            pat = tuple((_index(s), _index(c)) for s, c in pattern)
            off = _index(offset)
        except (TypeError, ValueError):
            raise refuse("unsupported", f"access pattern {pattern!r} offset {offset!r}: expected "
                         "[[stride, count], ...] of ints", self) from None
        if vector_offset is not None or indirect_dim != 0:
            from neuron_inductor import spec

            offs = None
            if isinstance(vector_offset, Tensor):
                offs = spec.Opnd(vector_offset.memory, vector_offset.alloc.dtype_name,
                                 vector_offset.partitions, vector_offset.free_size)
            found = spec.check_indirect(self.alloc.shape, self.alloc.memory, pat, indirect_dim, offs)
            if found:
                raise refuse(found[0].rule, found[0].cited(), self, vector_offset)
        if not pat or any(c < 0 for _, c in pat):
            raise refuse("out-of-bounds", f"bad access pattern {pattern!r}", self)
        # relative to the view's first element (element 0 for an unsliced flat tensor)
        base = 0
        if any(s for s, _, _ in self.dims):
            strides = np.cumprod((1,) + self.alloc.shape[:0:-1])[::-1]
            base = int(sum(s * int(k) for (s, _, _), k in zip(self.dims, strides)))
        # vector indirection: the row stride is the elements right of dim 0 of this tensor's shape
        # (the pattern's own partition stride is ignored by the hardware)
        row = int(np.prod(self.shape[1:], dtype=np.int64))
        return AccessPattern(self.alloc, pat, base + off, vector_offset, row)


class AccessPattern:
    """``pattern`` = ((stride, count), ...) in elements over the flat allocation, partition first."""

    __slots__ = ("alloc", "pattern", "offset", "indirect", "row")

    def __init__(self, alloc: Allocation, pattern: tuple[tuple[int, int], ...], offset: int,
                 indirect: Tensor | None, row: int = 1) -> None:
        self.row = row
        self.alloc = alloc
        self.pattern = pattern
        self.offset = offset
        self.indirect = indirect

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(c for _, c in self.pattern)

    @property
    def dtype(self) -> np.dtype:
        return self.alloc.dtype

    @property
    def memory(self) -> str:
        return "hbm"

    @property
    def itemsize(self) -> int:
        return self.alloc.dtype.itemsize

    @property
    def partitions(self) -> int:
        return self.pattern[0][1]

    @property
    def free_size(self) -> int:
        n = 1
        for _, c in self.pattern[1:]:
            n *= c
        return n

    def region_text(self) -> str:
        pat = [list(p) for p in self.pattern]
        ind = f", vector_offset={self.indirect.alloc.name}{self.indirect.region_text()}" \
            if self.indirect is not None else ""
        return f".ap(pattern={pat}, offset={self.offset}{ind})"

    def __repr__(self) -> str:
        return f"{self.alloc.name}{self.region_text()}"

    def _size(self) -> int:
        n = 1
        for _, c in self.pattern:
            n *= c
        return n

    def _indices(self) -> np.ndarray:
        """Element indices of an indirect pattern, shape = self.shape, bounds-checked."""
        idx_t = self.indirect
        if not isinstance(idx_t, Tensor) or idx_t.memory != "sbuf":
            raise refuse("engine-memory", "vector_offset must be an SBUF tile region", idx_t)
        if idx_t.dtype not in dt.INTS:
            raise refuse("dtype", "vector_offset must be an integer tile", idx_t)
        p = self.pattern[0][1]
        if idx_t.partitions != p or idx_t.free_size != 1:
            raise refuse("shape", f"vector_offset must be [{p}, 1] to index {p} partitions, got "
                         f"{list(idx_t.shape)}", idx_t, self)
        rows = idx_t.array.reshape(p).astype(np.int64) * self.row + self.offset
        nd = len(self.pattern)
        index = rows.reshape((p,) + (1,) * (nd - 1))
        for axis, (s, c) in enumerate(self.pattern[1:], start=1):
            shape = [1] * nd
            shape[axis] = c
            index = index + (np.arange(c, dtype=np.int64) * s).reshape(shape)
        index = np.broadcast_to(index, self.shape)
        if index.size and (index.min() < 0 or index.max() >= self.alloc.flat.size):
            raise refuse("out-of-bounds", f"indirect access touches elements "
                         f"[{int(index.min())}, {int(index.max())}] outside [0, "
                         f"{self.alloc.flat.size}) of the tensor", self, idx_t)
        return index

    def _strided(self, flat: np.ndarray) -> np.ndarray:
        lo = hi = self.offset
        for s, c in self.pattern:
            if c:
                lo += min(0, s * (c - 1))
                hi += max(0, s * (c - 1))
        if self._size() and (lo < 0 or hi >= flat.size):
            raise refuse("out-of-bounds", f"access pattern touches elements [{lo}, {hi}] outside "
                         f"[0, {flat.size}) of the tensor", self)
        if not self._size():
            return np.empty(self.shape, flat.dtype)
        item = flat.dtype.itemsize
        strides = [s * item for s, _ in self.pattern]
        try:  # the plain constructor is much cheaper than as_strided; bounds were checked above
            return np.ndarray(self.shape, flat.dtype, buffer=flat, offset=self.offset * item,
                              strides=strides)
        except (TypeError, ValueError):
            return np.lib.stride_tricks.as_strided(flat[self.offset:], shape=self.shape,
                                                   strides=strides)

    def _check_live(self) -> None:
        if self.alloc.released:
            raise refuse("scope", "HBM tensor used after its scope ended", self)

    def read(self) -> np.ndarray:
        self._check_live()
        if self.indirect is not None:
            return self.alloc.flat[self._indices()]
        return self._strided(self.alloc.flat)

    def write(self, values: np.ndarray) -> None:
        self._check_live()
        if self.indirect is not None:
            index = self._indices()
            self.alloc.flat[index] = values
            if self.alloc.written is not None:
                self.alloc.written[index] = True
            return
        self._strided(self.alloc.flat)[...] = values
        if self.alloc.written is not None:
            self._strided(self.alloc.written)[...] = True
