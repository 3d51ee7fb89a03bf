"""Host-side helpers the generated wrapper calls.

Only views and allocations live here: handing a tensor to a kernel, taking a logical view of a kernel's
flat result, allocating empty outputs and importing the sibling kernels module. Nothing computes, so
every FLOP of a compiled graph is in a kernel or in a declared (counted) fallback.

Flat spans: the hardware has no 64-bit or bool types, so an int64 tensor travels as twice as many int32
words (little-endian: the low word at the even index) and a bool tensor as uint8 bytes. Both are
reinterpretations of the same storage, never conversions.
"""
from __future__ import annotations

import _imp
import hashlib
import importlib.util
import marshal
import os
import sys
from types import ModuleType
from typing import Sequence

import torch

from neuron_inductor import stats

from .placement import graph_device, on_graph_device

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
    "float64": torch.float64, "int64": torch.int64, "int32": torch.int32, "uint32": torch.uint32,
    "int16": torch.int16, "uint16": torch.uint16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool,
}


def torch_dtype(name: str) -> torch.dtype:
    """``"float32"`` -> ``torch.float32`` (names as in ``TensorMeta.dtype`` and ``HBMTensor.dtype``)."""
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype name {name!r}; known: {sorted(_DTYPES)}") from None


def _reinterpret(flat: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Same bytes, other element type (a view); refuses anything that would need a conversion."""
    a, b = flat.dtype, dtype
    if a == b:
        return flat
    wide = {torch.int64}
    words = {torch.int32, torch.uint32}
    if (a.itemsize == b.itemsize and torch.bool not in (a, b)) or (a in wide and b in words) or \
            (a in words and b in wide):
        return flat.view(b)
    if a == torch.bool and b.itemsize == 1:
        flat = flat.view(torch.uint8)
        return flat if b == torch.uint8 else flat.view(b)
    if b == torch.bool and a.itemsize == 1:
        return flat.view(torch.bool)
    raise TypeError(f"cannot reinterpret {a} as {b} without a conversion")


def extent(size: Sequence[int], stride: Sequence[int]) -> int:
    """Elements of the smallest contiguous span holding every element (0 when empty)."""
    if any(s == 0 for s in size):
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(size, stride))


def hbm(t: torch.Tensor, hw_dtype: str) -> torch.Tensor:
    """The flat 1-D span of storage covering ``t``, reinterpreted to the kernel's hardware dtype.

    ``t``'s first element is element 0 of the span, so kernel access patterns use ``t``'s own strides
    with offset 0. int64 -> int32 words (length ``2 * extent``), bool -> uint8, same-size types by view.
    """
    t = on_graph_device(t)  # a graph constant, when the graph runs on the device
    n = extent(t.shape, t.stride())
    if n == 0:
        raise ValueError("hbm() of a tensor with no elements: kernels never take empty tensors")
    flat = torch.as_strided(t, (n,), (1,), t.storage_offset())
    return _reinterpret(flat, torch_dtype(hw_dtype))


def _from_numpy(a) -> torch.Tensor:
    """numpy -> torch without a copy; bfloat16 (ml_dtypes, unknown to torch) travels as int16 bits."""
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view("int16")).view(torch.bfloat16)
    return torch.from_numpy(a)


def view(buf: torch.Tensor, size: Sequence[int], stride: Sequence[int], offset: int,
         dtype: str) -> torch.Tensor:
    """The logical tensor (``size``, ``stride``, ``offset`` in elements of ``dtype``) over a flat
    kernel buffer; the inverse of :func:`hbm` (int32 words -> int64, uint8 -> bool)."""
    if not isinstance(buf, torch.Tensor):  # numpy: a kernel with no tensor arguments, a device runtime
        buf = _from_numpy(buf)
    buf = buf.reshape(-1) if buf.dim() != 1 else buf
    t = _reinterpret(buf, torch_dtype(dtype))
    need = extent(size, stride) + offset
    if need > t.numel():
        raise ValueError(f"view of {tuple(size)}/{tuple(stride)}+{offset} needs {need} elements, "
                         f"buffer has {t.numel()}")
    # Not ``torch.as_strided``: autograd would mark a view returned from AOTAutograd's
    # CompiledFunction as an output of a multi-output function and refuse in-place updates of it
    # (Trainer does ``loss *= scale``). ``set_`` aliases the same storage without being a view.
    out = torch.empty((0,), dtype=t.dtype, device=t.device)
    return out.set_(t.untyped_storage(), t.storage_offset() + offset, tuple(size), tuple(stride))


def user_result(ret: object, index: int, count: int, size: Sequence[int], dtype: str,
                kernel: str) -> torch.Tensor:
    """Output ``index`` of a hand-written kernel's return value, checked against the custom op's
    fake output: a kernel returning the wrong shape or dtype is a clear error here, never a
    reinterpretation of its bytes downstream."""
    if count > 1:
        if not isinstance(ret, (tuple, list)) or len(ret) != count:
            raise TypeError(f"NKI kernel {kernel} must return {count} arrays (one per output of its "
                            f"op), got {type(ret).__name__}")
        ret = ret[index]
    if isinstance(ret, (tuple, list)):
        raise TypeError(f"NKI kernel {kernel} returned a {type(ret).__name__}; its op has one output")
    if not isinstance(ret, torch.Tensor):
        if not hasattr(ret, "dtype") or not hasattr(ret, "shape"):
            raise TypeError(f"NKI kernel {kernel} returned {type(ret).__name__}, not an HBM array")
        ret = _from_numpy(ret)
    want = torch_dtype(dtype)
    if tuple(ret.shape) != tuple(size) or ret.dtype != want:
        raise ValueError(f"NKI kernel {kernel} output {index} is {str(ret.dtype).replace('torch.', '')}"
                         f"{list(ret.shape)}, but its op's fake implementation says {dtype}{list(size)}")
    return ret


def conform(ret: object, dtypes: str | tuple | None) -> object:
    """A declared fallback's result with each tensor in the dtype the graph's fake tensor has.

    Some eager CPU kernels return another dtype than their meta function says (bf16
    ``_native_batch_norm_legit_functional`` returns its running stats in bf16, its meta fp32); the
    kernels after the fallback read the graph's dtype, so the value is converted here, as eager's
    own later ops would have promoted it."""
    if isinstance(ret, (tuple, list)):
        wants = tuple(dtypes or ()) + (None,) * len(ret)
        out = tuple(conform(r, d) for r, d in zip(ret, wants))
        return out if type(ret) is tuple else type(ret)(out)
    if isinstance(ret, torch.Tensor) and dtypes is not None:
        want = getattr(torch, dtypes, None)  # any torch dtype: a fallback may return uint64 etc.
        if isinstance(want, torch.dtype) and ret.dtype != want:
            return ret.to(want)
    return ret


def empty(size: Sequence[int], stride: Sequence[int], dtype: str) -> torch.Tensor:
    """An uninitialised tensor on the graph's device (used for outputs with no elements)."""
    return torch.empty_strided(tuple(size), tuple(stride), dtype=torch_dtype(dtype), device=graph_device())


def rng_key(size: Sequence[int]) -> torch.Tensor:
    """Random int32 words from torch's default generator: the key of a counter-based random stream
    the kernels compute (a draw of a few words, no computation)."""
    dev = graph_device()
    if dev is not None:  # drawn by the device's generator, where the kernels read it
        return torch.randint(-(1 << 31), (1 << 31) - 1, tuple(size), dtype=torch.int32, device=dev)
    return torch.randint(-(1 << 31), (1 << 31) - 1, tuple(size), dtype=torch.int32)


# ------------------------------------------------------------------------------------------ modules

def load_sibling(file: str, name: str) -> ModuleType:
    """Import ``<dir of file>/<name>.py`` under a module name unique to that directory.

    Each compiled graph lives in its own directory with the same file names (``kernels.py``,
    ``wrapper.py``); keying the module name on the directory keeps two graphs from ever sharing a
    ``sys.modules`` entry, and loading from the real file keeps tracebacks pointing at real lines.
    """
    directory = os.path.dirname(os.path.abspath(file))
    return load_file(os.path.join(directory, f"{name}.py"))


def module_name_for(path: str) -> str:
    path = os.path.abspath(path)
    digest = hashlib.sha256(os.path.dirname(path).encode()).hexdigest()[:16]
    stem = os.path.splitext(os.path.basename(path))[0]
    return f"neuron_inductor_generated_{digest}.{stem}"


#: compiled code stored beside a generated source (``kernels.py`` -> ``kernels.cpython-311.code``)
BYTECODE_SUFFIX = f".{sys.implementation.cache_tag}.code"
_MAGIC = importlib.util.MAGIC_NUMBER


def bytecode_path(source_path: str) -> str:
    return os.path.splitext(source_path)[0] + BYTECODE_SUFFIX


def bytecode_for(source: str | bytes, filename: str) -> bytes:
    """Marshalled code of ``source``, prefixed by the interpreter's bytecode magic and the source's
    sha256, so it is only ever used for exactly that source on exactly this bytecode format."""
    src = source.encode("utf-8") if isinstance(source, str) else source
    code = compile(src, filename, "exec", dont_inherit=True)
    return _MAGIC + hashlib.sha256(src).digest() + marshal.dumps(code)


def _code_for(path: str) -> object:
    """The code object for the source file ``path``: from its stored bytecode when that matches.

    Compiling the big generated modules was most of a warm cache hit's own cost. We do not let the
    import system cache bytecode because it writes ``__pycache__`` into the directory (a cache
    entry's files are checksummed and size-accounted); the cache stores it as an entry file instead.
    """
    with open(path, "rb") as f:
        src = f.read()
    try:
        with open(bytecode_path(path), "rb") as f:
            data = f.read()
    except OSError:
        data = b""
    n = len(_MAGIC)
    if data[:n] == _MAGIC and data[n:n + 32] == hashlib.sha256(src).digest():
        try:
            code = marshal.loads(data[n + 32:])
        except (EOFError, ValueError, TypeError):
            code = None
        if code is not None:
            fix = getattr(_imp, "_fix_co_filename", None)
            if fix is not None:  # point tracebacks and inspect at the real file, as .pyc imports do
                fix(code, path)
            return code
    return compile(src, path, "exec", dont_inherit=True)


def load_file(path: str) -> ModuleType:
    """Import one Python file as a fresh module (see :func:`load_sibling`)."""
    path = os.path.abspath(path)
    modname = module_name_for(path)
    spec = importlib.util.spec_from_file_location(modname, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load generated module {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    try:
        # never through the import system: it would write __pycache__ into the directory
        exec(_code_for(path), module.__dict__)
    except BaseException:
        sys.modules.pop(modname, None)
        raise
    return module


# ------------------------------------------------------------------------ fallbacks and collectives

def count_fallback(op: str) -> None:
    """One eager call of a declared fallback (counted in ``neuron_inductor.stats.host_calls()``)."""
    stats.record_host_call("fallbacks", op)


def count_collective(op: str) -> None:
    """One call of a declared collective: counted apart from fallbacks (not a missing lowering)."""
    stats.record_host_call("collectives", op)


def fallback_counts() -> dict[str, int]:
    """Fallback calls per op since the last reset."""
    return stats.host_calls()["fallbacks"]


def collective_counts() -> dict[str, int]:
    return stats.host_calls()["collectives"]


def reset_fallback_counts() -> None:
    """Zero the run-time host call counters (fallbacks and collectives: one stats section)."""
    stats.reset("host")


reset_collective_counts = reset_fallback_counts
