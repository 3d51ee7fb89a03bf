"""``cumsum`` and ``cumprod``: prefix scans along one axis with ``nisa.tensor_tensor_scan`` (VectorE).

The scanned axis lies on the free axis of a tile and the other dims on partitions
(``along_axis.walk_rows``). One instruction scans a chunk of up to ``free_chunk`` elements per
partition: ``r[i] = op1(op0(ones[i], r[i-1]), x[i])`` with ``op0 = multiply`` and ``op1 = add``
(cumsum) or ``multiply`` (cumprod), as AWS's ``nkilib`` cumsum kernel does. Longer axes are walked
chunk by chunk in a sequential loop, the last column of one chunk being the ``initial`` of the next.

Numerics. The engine computes in fp32, and the running value stays in an fp32 tile: fp32 results
follow eager's sequential order, and bf16/fp16 results are rounded once per element from an fp32
running sum, as eager's CPU kernel does (it accumulates in a wider type and casts each output).
Integer inputs give exact results only while every partial result is an integer below 2^24; this
lowering takes integer inputs whose bound proves it (bool, uint8, int8, int16 along short enough
axes; cumprod of bool) and stores the int64 result as its low word plus the sign word. int32 and
int64 cumsums are exact byte by byte (``scan_int64``). What is left (integer products, int64 into
floats) raises ``NotImplementedError``: a declared fallback.
"""
from __future__ import annotations

from dataclasses import replace

import torch
import torch.fx as fx

from .along_axis import Chunk, Rows, walk_rows
from .builder import KernelBuilder
from .indexing import free_chunk_of, norm_dim
from .regions import output_region, source_region
from .integers import EXACT
from .registry import KernelContext, register_lowering
from .scan_int64 import lower_int64_cumsum
from ..spec import AluOp

aten = torch.ops.aten

#: |x| of each integer input dtype (the scan of L elements stays below L * bound)
_INT_BOUND = {"bool": 1, "uint8": 255, "int8": 128, "int16": 1 << 15}
_FLOATS = ("float32", "bfloat16", "float16")


def _check_exact(op: str, src_dtype: str, out_dtype: str, length: int) -> None:
    """Refuse (declared fallback) an integer scan whose partial results may leave fp32's exact range."""
    if out_dtype in _FLOATS:
        if src_dtype == "int64":
            raise NotImplementedError(f"{op} of int64 into {out_dtype}: the high words are not read")
        return
    if out_dtype not in ("int64", "int32"):
        raise NotImplementedError(f"{op} into {out_dtype}")
    if src_dtype in _FLOATS:
        raise NotImplementedError(f"{op} of {src_dtype} into {out_dtype} (truncation per element)")
    bound = _INT_BOUND.get(src_dtype)
    if bound is None:
        raise NotImplementedError(f"{op} of {src_dtype}: partial results are not proven below 2^24, where "
                                  "the engine's fp32 arithmetic is exact")
    if op == "cumsum" and length * bound >= EXACT:
        raise NotImplementedError(f"cumsum of {length} {src_dtype} values may reach 2^24")
    if op == "cumprod" and src_dtype != "bool" and length > 1:
        raise NotImplementedError(f"cumprod of {src_dtype}: products are not proven below 2^24")


@register_lowering(aten.cumsum.default, aten.cumprod.default, kind="kernel")
def lower_scan(ctx: KernelContext, x: fx.Node, dim: int, dtype=None) -> None:
    """out = cumsum / cumprod of x along ``dim`` (into ``dtype``: the output node's dtype)."""
    n, sources, kb, out_tensors, out_meta, cfg = ctx.unpack()
    op = "cumsum" if n.target is aten.cumsum.default else "cumprod"
    xr = source_region(kb, sources[x])
    out = output_region(out_tensors, out_meta, n)
    if not xr.sizes:  # a 0-dim tensor scans as one element
        xr, out = replace(xr, sizes=(1,), strides=(1,)), replace(out, sizes=(1,), strides=(1,))
    d = norm_dim(dim, len(xr.sizes))
    length = xr.sizes[d]
    if op == "cumsum" and xr.dtype in ("int32", "int64") and out.dtype in ("int32", "int64"):
        lower_int64_cumsum(kb, xr, out, d)  # byte-wise exact scans
        return
    _check_exact(op, xr.dtype, out.dtype, length)
    combine = "add" if op == "cumsum" else "multiply"
    identity = 0.0 if op == "cumsum" else 1.0
    src = xr.word(0)
    words = [out.word(0)] + ([out.word(1)] if out.dtype == "int64" else [])
    chunk = free_chunk_of(cfg)
    ones = kb.tile((kb.target.partitions, min(length, chunk)), "float32", prefix="ones")
    kb.memset(ones.full(), 1.0)
    kb.plan = f"{op} along dim {d} ({length}) with tensor_tensor_scan"

    def rows_body(rw: Rows) -> None:
        carry = None
        if rw.n_chunks > 1:  # the running value crosses chunks: the previous chunk's last column
            carry = kb.tile((rw.tile_rows, 1), "float32", prefix="carry").region(rw.rows, 1)
            kb.memset(carry, identity)
        with rw.chunks("sequential" if carry is not None else "affine") as ch:
            scan_chunk(rw, ch, carry)

    def scan_chunk(rw: Rows, ch: Chunk, carry) -> None:
        shape = (rw.tile_rows, rw.chunk)
        xt = kb.tile(shape, src.tensor.dtype, prefix="x").region(rw.rows, ch.cols)
        kb.dma(xt, ch.access(0))
        acc = kb.tile(shape, "float32", prefix="acc").region(rw.rows, ch.cols)
        kb.tensor_tensor_scan(acc, data0=ones.region(rw.rows, ch.cols), data1=xt,
                              initial=carry if carry is not None else identity, op0=AluOp.multiply, op1=combine)
        if carry is not None:
            kb.copy("vector", carry, type(acc)(acc.tile, (0, ch.cols - 1), (rw.rows, 1)))
        store(rw, ch, acc)

    def store(rw: Rows, ch: Chunk, acc) -> None:
        lo_dt = words[0].tensor.dtype
        res = acc
        if lo_dt != "float32":  # cast once per element from the fp32 running value
            res = kb.tile((rw.tile_rows, rw.chunk), lo_dt, prefix="res").region(rw.rows, ch.cols)
            kb.copy("vector", res, acc)
        kb.dma(ch.access(1), res)
        if len(words) == 2:  # int64: the high word is the sign of the (exact, < 2^24) result
            hi = kb.tile((rw.tile_rows, rw.chunk), "int32", prefix="hi").region(rw.rows, ch.cols)
            kb.tensor_scalar(hi, data=acc, operand0=0.0, operand1=-1.0, op0=AluOp.less, op1=AluOp.multiply)
            kb.dma(ch.access(2), hi)

    walk_rows(kb, xr.sizes, d, [src] + words, chunk, rows_body)
