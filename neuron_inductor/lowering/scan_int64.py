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
        if rw.n_chunks > 1:  # each byte's running sum carried from chunk to chunk
            carries = []
            for _ in range(nb):
                c = kb.tile((rw.tile_rows, 1), "float32", prefix="carry").region(rw.rows, 1)
                kb.memset(c, 0.0)
                carries.append(c)
        with rw.chunks("sequential" if carries else "affine") as ch:
            scan = _ByteScan(kb, rw, ch, C)
            words = scan.load_words(len(words_in))
            sums = scan.byte_sums(words, nb, ones, carries)
            scan.store(scan.digits(sums), len(words_in), len(words_out))

    walk_rows(kb, xr.sizes, d, words_in + words_out, C, rows_body)


class _ByteScan:
    """One chunk of rows: the input words in, the byte prefix sums, their carries, the result words
    out. Every temporary is released as soon as its last reader is emitted, so the chunk's tiles stay
    within SBUF."""

    def __init__(self, kb: KernelBuilder, rw: Rows, ch: Chunk, C: int) -> None:
        self.kb, self.rw, self.ch, self.C = kb, rw, ch, C

    def new(self, dtype: str, prefix: str) -> TileRegion:
        return self.kb.tile((self.rw.tile_rows, self.C), dtype, prefix=prefix).region(self.rw.rows, self.ch.cols)

    def ts(self, src, op0, v0, op1=None, v1=None, dtype="int32", prefix="t") -> TileRegion:
        dst = self.new(dtype, prefix)
        self.kb.tensor_scalar(dst, data=src, op0=op0, operand0=v0, op1=op1,
                              operand1=v1 if op1 is not None else None)
        return dst

    def tt(self, a, b, op, engine) -> TileRegion:
        dst = self.new("int32", "t")
        self.kb.tensor_tensor(dst, data1=a, data2=b, op=op, engine=engine)
        return dst

    def free(self, *regions: TileRegion) -> None:
        for r in regions:
            self.kb.release(r.tile)

    def combine(self, a: TileRegion, b: TileRegion) -> TileRegion:
        """a | b (disjoint bits), freeing both."""
        r = self.tt(a, b, "bitwise_or", "vector")
        self.free(a, b)
        return r

    def load_words(self, n_in: int) -> list[TileRegion]:
        """The chunk's int32 input words; an int32 input's high word is its sign word."""
        words = []
        for k in range(n_in):
            t = self.new("int32", "w")
            self.kb.dma(t, self.ch.access(k))
            words.append(t)
        if len(words) == 1:
            words.append(self.ts(words[0], "less", 0.0, "multiply", -1.0, prefix="sign"))
        return words

    def byte_sums(self, words: list, nb: int, ones, carries) -> list[TileRegion]:
        """The exact fp32 prefix sum of each kept byte (as int32), carried in from the previous chunk;
        frees the words."""
        kb, rw, ch = self.kb, self.rw, self.ch
        sums = []
        for k in range(nb):
            w, shift = words[k // 4], 8 * (k % 4)
            b = self.ts(w, "right_shift", shift, "bitwise_and", 255, prefix="byte") if shift \
                else self.ts(w, "bitwise_and", 255, prefix="byte")
            s = self.new("float32", "sum")
            kb.tensor_tensor_scan(s, data0=ones.region(rw.rows, ch.cols), data1=b,
                                  initial=carries[k] if carries else 0.0, op0=AluOp.multiply, op1=AluOp.add)
            if carries:
                kb.copy("vector", carries[k], TileRegion(s.tile, (0, ch.cols - 1), (rw.rows, 1)))
            si = self.new("int32", "isum")
            kb.copy("vector", si, s)  # an integer below 2^24: exact
            sums.append(si)
            self.free(b, s)
        self.free(*words)
        return sums

    def digits(self, sums: list) -> list[TileRegion]:
        """The result's bytes: each byte sum plus the carry of the one below, low 8 bits kept."""
        digits, carry = [], None
        nb = len(sums)
        for k in range(nb):
            t = sums[k] if carry is None else self.tt(sums[k], carry, "add", "gpsimd")
            digits.append(self.ts(t, "bitwise_and", 255, prefix="digit"))
            nxt = self.ts(t, "right_shift", 8, prefix="cy") if k + 1 < nb else None
            self.free(*{id(x): x for x in (t, sums[k]) + ((carry,) if carry is not None else ())}.values())
            carry = nxt
        return digits

    def store(self, digits: list, n_in: int, n_out: int) -> None:
        """Four bytes per result word, shifted into place, stored."""
        for j in range(n_out):
            dg = digits[4 * j:4 * j + 4]
            acc = self.combine(dg[0], self.ts(dg[1], "left_shift", 8))
            acc = self.combine(acc, self.ts(dg[2], "left_shift", 16))
            # the top byte as a signed value, so its shift stays inside int32
            neg = self.ts(dg[3], "greater_equal", 128.0, "multiply", -256.0)
            top = self.tt(dg[3], neg, "add", "gpsimd")
            self.free(neg)
            acc = self.combine(acc, self.ts(top, "left_shift", 24))
            self.kb.dma(self.ch.access(n_in + j), acc)
            self.free(acc, top, *dg)
