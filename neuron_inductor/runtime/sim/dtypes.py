"""Hardware dtypes on numpy.

NKI dtypes are plain ``numpy.dtype`` objects here (bf16 from ``ml_dtypes``), so tiles keep their real
storage precision.  Engines compute in fp32 and cast on write (:func:`cast_to`). The NKI docs do not
say how float -> int conversion rounds or what NaN, Inf and out-of-range values become: the
instructions refuse the latter (spec rule ``float-int-conversion``) before calling :func:`cast_to`,
and fractions truncate toward zero, a choice of this simulator (docs/numerics.md).
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

float32 = np.dtype(np.float32)
float16 = np.dtype(np.float16)
int32 = np.dtype(np.int32)
uint32 = np.dtype(np.uint32)
int16 = np.dtype(np.int16)
uint16 = np.dtype(np.uint16)
int8 = np.dtype(np.int8)
uint8 = np.dtype(np.uint8)

# bfloat16 joins these when ml_dtypes is loaded (see _load_bfloat16); until then no array can have it
FLOATS = {float32, float16}
INTS = frozenset({int32, uint32, int16, uint16, int8, uint8})
SUPPORTED = FLOATS | INTS

NAMES = {float32: "float32", float16: "float16", int32: "int32",
         uint32: "uint32", int16: "int16", uint16: "uint16", int8: "int8", uint8: "uint8"}
#: every hardware dtype name, bfloat16 included whether or not it is loaded yet
ALL_NAMES = tuple(sorted([*NAMES.values(), "bfloat16"]))

_bfloat16: np.dtype | None = None


def _load_bfloat16() -> np.dtype:
    """Import ml_dtypes on first use of bf16.

    Its import registers casts and ufuncs for a dozen numpy types and costs 0.3-1.3 s, more than
    everything else a warm-cache start of a compiled fp32 model does in this package; fp32 graphs
    never need it.
    """
    global _bfloat16
    if _bfloat16 is None:
        import ml_dtypes

        d = np.dtype(ml_dtypes.bfloat16)
        FLOATS.add(d)
        SUPPORTED.add(d)
        NAMES[d] = "bfloat16"
        globals()["bfloat16"] = _bfloat16 = d
    return _bfloat16


def __getattr__(name: str) -> Any:
    if name == "bfloat16":
        return _load_bfloat16()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if "ml_dtypes" in sys.modules:  # already paid for: no reason to defer
    _load_bfloat16()


def _late_bf16(d: np.dtype) -> bool:
    """A bf16 dtype made by an ml_dtypes someone imported after us: register it, and say so."""
    return _bfloat16 is None and d.name == "bfloat16" and _load_bfloat16() == d


def normalize(dtype: Any) -> np.dtype | None:
    """A supported dtype, or None when the hardware has no such type (64-bit, complex, ...)."""
    if isinstance(dtype, str) and dtype == "bfloat16":
        return _load_bfloat16()
    try:
        d = np.dtype(dtype)
    except TypeError:
        return None
    if d == np.bool_:
        return uint8
    return d if d in SUPPORTED or _late_bf16(d) else None


def is_float(dtype: np.dtype) -> bool:
    return dtype in FLOATS or _late_bf16(dtype)


def fill_value(dtype: np.dtype) -> Any:
    """What a fresh allocation holds: NaN for floats; for ints the dtype's maximum, which is both
    visible in a dump and out of bounds when used as a gather index."""
    return np.nan if is_float(dtype) else np.iinfo(dtype).max


def to_f32(a: np.ndarray) -> np.ndarray:
    """Operand as the fp32 the engines compute in."""
    return a.astype(np.float32, copy=False) if a.dtype != float32 else a


def cast_to(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Cast computed values to the destination dtype the way a write port would."""
    if values.dtype == dtype:
        return values
    if is_float(dtype):
        with np.errstate(all="ignore"):
            return values.astype(dtype)
    info = np.iinfo(dtype)
    if values.dtype.kind in "iu":
        return np.clip(values, info.min, info.max).astype(dtype)
    with np.errstate(all="ignore"):
        v = np.trunc(values.astype(np.float64))
        v = np.nan_to_num(v, nan=0.0, posinf=info.max, neginf=info.min)
        return np.clip(v, info.min, info.max).astype(dtype)
