"""Exact ``cumsum`` of int32 / int64 tensors into int64, on engines whose scan computes in fp32.

``tensor_tensor_scan`` adds in fp32, exact only below 2^24. A 64-bit two's-complement value is
the sum of its eight bytes ``b_k * 2^(8k)``, each in [0, 255], so

    cumsum(x) = sum_k cumsum(b_k) * 2^(8k)   (mod 2^64)

and each byte's prefix sum stays below ``L * 255 < 2^24`` for an axis of up to 65792 elements: eight
exact fp32 scans. Bytes come out of the int32 words with bitvec shifts and masks (VectorE, exact);
the eight sums are recombined with carries in int32 (GpSimd integer adds, native 32-bit) into the
low and high words of the int64 result. An int32 input's high word is its sign word. Longer axes
raise ``NotImplementedError``: a declared fallback.
"""
from __future__ import annotations

from ..ir import TileRegion
from .along_axis import Chunk, Rows, walk_rows
from .builder import KernelBuilder
from .regions import LRegion
from .integers import EXACT
from ..spec import AluOp

#: longest axis whose byte prefix sums fp32 holds exactly
MAX_LENGTH = (EXACT - 1) // 255
#: chunk of the axis per scan: 8 running sums, 8 bytes and temporaries live at once
CHUNK = 512


def lower_int64_cumsum(kb: KernelBuilder, xr: LRegion, out: LRegion, d: int) -> None:
    """out (int64 or int32) = cumsum of int32 / int64 ``xr`` along ``d``, exactly (mod 2^width)."""
    length = xr.sizes[d]
    if length > MAX_LENGTH:
        raise NotImplementedError(f"exact cumsum of {length} {xr.dtype} values: byte sums may reach 2^24")
    words_in = [xr.word(0)] + ([xr.word(1)] if xr.dtype == "int64" else [])
    words_out = [out.word(0)] + ([out.word(1)] if out.dtype == "int64" else [])
    C = min(length, CHUNK)
    ones = kb.tile((kb.target.partitions, C), "float32", prefix="ones")
    kb.memset(ones.full(), 1.0)
    nb = 4 * len(words_out)  # bytes of the result that are kept
    kb.plan = f"exact {xr.dtype} cumsum along dim {d} ({length}) as {nb} byte scans with carries"

    def rows_body(rw: Rows) -> None:
        carries = None
        if rw.n_chunks > 1:
            carries = []
            for _ in range(nb):
                c = kb.tile((rw.tile_rows, 1), "float32", prefix="carry").region(rw.rows, 1)
                kb.memset(c, 0.0)
                carries.append(c)
        with rw.chunks("sequential" if carries else "affine") as ch:
            chunk_body(rw, ch, carries)

    def chunk_body(rw: Rows, ch: Chunk, carries) -> None:
        def new(dtype: str, prefix: str) -> TileRegion:
            return kb.tile((rw.tile_rows, C), dtype, prefix=prefix).region(rw.rows, ch.cols)

        def ts(src, op0, v0, op1=None, v1=None, dtype="int32", prefix="t") -> TileRegion:
            dst = new(dtype, prefix)
            kb.tensor_scalar(dst, data=src, op0=op0, operand0=v0, op1=op1,
                             operand1=v1 if op1 is not None else None)
            return dst

        def tt(a, b, op, engine) -> TileRegion:
            dst = new("int32", "t")
            kb.tensor_tensor(dst, data1=a, data2=b, op=op, engine=engine)
            return dst

        def free(*regions: TileRegion) -> None:
            for r in regions:
                kb.release(r.tile)

        def combine(a: TileRegion, b: TileRegion) -> TileRegion:
            """a | b (disjoint bits), freeing both."""
            r = tt(a, b, "bitwise_or", "vector")
            free(a, b)
            return r

        words = []
        for k, w in enumerate(words_in):
            t = new("int32", "w")
            kb.dma(t, ch.access(k))
            words.append(t)
        if len(words) == 1:  # int32: the high word is the sign word
            words.append(ts(words[0], "less", 0.0, "multiply", -1.0, prefix="sign"))
        sums = []
        for k in range(nb):
            w, shift = words[k // 4], 8 * (k % 4)
            b = ts(w, "right_shift", shift, "bitwise_and", 255, prefix="byte") if shift \
                else ts(w, "bitwise_and", 255, prefix="byte")
            s = new("float32", "sum")
            kb.tensor_tensor_scan(s, data0=ones.region(rw.rows, ch.cols), data1=b,
                                  initial=carries[k] if carries else 0.0, op0=AluOp.multiply, op1=AluOp.add)
            if carries:
                kb.copy("vector", carries[k], TileRegion(s.tile, (0, ch.cols - 1), (rw.rows, 1)))
            si = new("int32", "isum")
            kb.copy("vector", si, s)  # an integer below 2^24: exact
            sums.append(si)
            free(b, s)
        free(*words)
        digits, carry = [], None
        for k in range(nb):
            t = sums[k] if carry is None else tt(sums[k], carry, "add", "gpsimd")
            digits.append(ts(t, "bitwise_and", 255, prefix="digit"))
            nxt = ts(t, "right_shift", 8, prefix="cy") if k + 1 < nb else None
            free(*{id(x): x for x in (t, sums[k]) + ((carry,) if carry is not None else ())}.values())
            carry = nxt
        for j, region in enumerate(words_out):
            dg = digits[4 * j:4 * j + 4]
            acc = combine(dg[0], ts(dg[1], "left_shift", 8))
            acc = combine(acc, ts(dg[2], "left_shift", 16))
            # the top byte as a signed value, so its shift stays inside int32
            neg = ts(dg[3], "greater_equal", 128.0, "multiply", -256.0)
            top = tt(dg[3], neg, "add", "gpsimd")
            free(neg)
            acc = combine(acc, ts(top, "left_shift", 24))
            kb.dma(ch.access(len(words_in) + j), acc)
            free(acc, top, *dg)

    walk_rows(kb, xr.sizes, d, words_in + words_out, C, rows_body)
