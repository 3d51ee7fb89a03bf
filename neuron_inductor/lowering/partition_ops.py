"""Work across the partition axis inside a fused kernel, on TensorE (idle in elementwise kernels).

VectorE/ScalarE only combine elements within a partition, yet norms need two things across rows:

* **column sums** — a weight/bias gradient ``sum(dY * xhat, rows)`` next to the row statistics of
  dX. Each row tile adds ``ones[rows, 1]^T @ x[rows, F]`` into a ``[1, F]`` fp32 accumulator, so the
  sum happens in the same pass that reads dY and X for dX (one HBM read) instead of a second kernel
  reading them again transposed, one element per descriptor;
* **partition broadcast** — a leaf constant along the row axis (a norm's weight ``[F]``) is read once
  as one ``[1, F]`` row and copied to all partitions with ``ones[1, 128]^T @ w[1, F]``, instead of a
  stride-0 DMA that reads it from HBM once per partition per row tile.

Both go through PSUM in blocks of one bank (512 fp32 columns). Accumulators stay in PSUM across the
row-tile loop (the first row tile's matmul writes, ``accumulate=True`` after it) when they fit the banks; else each
tile's block sum is added into an SBUF accumulator on VectorE (the row loop is then sequential).
"""
from __future__ import annotations

from ..ir import Tile, TileRegion
from .builder import KernelBuilder, ceil_div
from ..spec import AluOp

FLOATS = ("float32", "bfloat16", "float16")


def bank_cols(kb: KernelBuilder) -> int:
    return kb.target.psum_bank_fp32


class ColumnSums:
    """``[1, F]`` fp32 accumulators of column sums over every row tile of a kernel, one per node."""

    def __init__(self, kb: KernelBuilder, keys: list, fsize: int, reserved_banks: int) -> None:
        self.kb, self.fsize = kb, fsize
        self.bw = bank_cols(kb)
        self.nblk = ceil_div(fsize, self.bw)
        self.in_psum = len(keys) * self.nblk + reserved_banks <= kb.target.psum_banks
        self.acc: dict = {}
        self._ones: dict[str, Tile] = {}
        for k in keys:
            if self.in_psum:
                # no memset: the first matmul of the row loops writes each block (accumulating onto
                # PSUM initialised by another instruction is undefined on hardware)
                self.acc[k] = [kb.tile((1, self.bw), "float32", "psum", prefix="colsum")
                               for _ in range(self.nblk)]
            else:
                t = kb.tile((1, fsize), "float32", prefix="colsum")
                kb.memset(t.region(1, fsize), 0.0)
                self.acc[k] = t

    @property
    def loop_kind(self) -> str:
        """SBUF accumulators carry a dependency from one row tile to the next."""
        return "affine" if self.in_psum else "sequential"

    def _width(self, j: int) -> int:
        return min(self.bw, self.fsize - j * self.bw)

    def ones(self, dtype: str) -> Tile:
        """A ``[128, 1]`` column of ones (allocated before the loops, once per dtype)."""
        if dtype not in self._ones:
            t = self.kb.tile((self.kb.target.partitions, 1), dtype, prefix="ones")
            self.kb.memset(t.full(), 1.0)
            self._ones[dtype] = t
        return self._ones[dtype]

    def add(self, key, x: TileRegion, rows, later) -> None:
        """Accumulate the column sums of the row tile ``x[0:rows, 0:F]``. ``later`` (a sympy
        condition on the loop variables, or a bool) is false for the first row tile: its matmul
        overwrites the PSUM accumulator, the others accumulate onto it."""
        if x.dtype not in self._ones:  # integers, or no ones column of this dtype: sum an fp32 copy
            f32 = self.kb.tile(tuple(x.tile.shape), "float32", prefix="t")
            self.kb.copy("vector", TileRegion(f32, x.starts, x.sizes), x)
            x = TileRegion(f32, x.starts, x.sizes)
        ones = self._ones[x.dtype].region(rows, 1)
        r0, c0 = x.starts[0], x.starts[1]
        for j in range(self.nblk):
            w = self._width(j)
            mov = TileRegion(x.tile, (r0, c0 + j * self.bw), (rows, w))
            if self.in_psum:
                self.kb.nc_matmul(self.acc[key][j].region(1, w), stationary=ones, moving=mov, accumulate=later)
                continue
            part = self.kb.tile((1, self.bw), "float32", "psum", prefix="colpart")
            self.kb.nc_matmul(part.region(1, w), stationary=ones, moving=mov, accumulate=False)
            acc = TileRegion(self.acc[key], (0, j * self.bw), (1, w))
            self.kb.tensor_tensor(acc, data1=acc, data2=part.region(1, w), op=AluOp.add)
            self.kb.release(part)

    def result(self, key) -> TileRegion:
        """The finished ``[1, F]`` sums in SBUF (evicted from PSUM if they accumulated there)."""
        if not self.in_psum:
            return self.acc[key].region(1, self.fsize)
        t = self.kb.tile((1, self.fsize), "float32", prefix="colres")
        for j, b in enumerate(self.acc[key]):
            w = self._width(j)
            self.kb.tensor_copy(TileRegion(t, (0, j * self.bw), (1, w)), src=b.region(1, w))
        return t.region(1, self.fsize)


def broadcast_partitions(kb: KernelBuilder, row: TileRegion, cols: int, scratch: Tile,
                         ones: Tile) -> Tile:
    """A ``[128, cols]`` tile whose every partition holds ``row`` (``[1, cols]``): TensorE multiplies
    it by a ``[1, 128]`` row of ones, one PSUM bank at a time, and VectorE evicts each block."""
    PMAX = kb.target.partitions
    dst = kb.tile((PMAX, cols), row.dtype, prefix="bcast")
    bw = bank_cols(kb)
    for j in range(ceil_div(cols, bw)):
        w = min(bw, cols - j * bw)
        kb.nc_matmul(scratch.region(PMAX, w), stationary=ones.region(1, PMAX),
                     moving=TileRegion(row.tile, (row.starts[0], row.starts[1] + j * bw), (1, w)), accumulate=False)
        kb.tensor_copy(TileRegion(dst, (0, j * bw), (PMAX, w)), src=scratch.region(PMAX, w))
    return dst
