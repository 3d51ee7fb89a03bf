"""What both flash attention kernels share: the case they take, their operands, masks and copies.

The public seam of the package (``forward.py`` and ``backward.py`` import these names): the limits and
mask constants, :func:`unsupported` (the cases the kernels take), :class:`HeadTensor` (a
``[B, H, S, D]``-like HBM operand) and the helpers that read a node's operands and results, the
engine-portable copy and transpose instructions, and :class:`AttnCtx` (engines by role, masks).

Masks follow torch's CPU flash kernel, which is what eager runs on CPU: masked-out scores (bool False,
-inf, causal) get the bias -HARD, finite additive values (``finfo.min``) are added as they are (clamped
at -SOFT), and a query row left without any key (left padding) gets output 0 and logsumexp 0, so its
gradients are 0 too (see ``AttnCtx``).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
import torch.fx as fx

from ...ir import HBMAccess, HBMTensor, Instr, TensorMeta, Tile, TileRegion
from ...spec import INSTRS, ActFunc, AluOp, Engine
from ...target import common_limit
from ..builder import KernelBuilder, instr_of
from ..layout import LoweringError, broadcast_strides, hw_dtype, word_scale

aten = torch.ops.aten
#: partitions of a tile and columns of a PSUM score bank, from the target (the same on every target)
PMAX = common_limit("partitions")
NMAX = common_limit("matmul_n_max")
#: 128-key blocks per PSUM bank of fp32 scores
BLOCKS_PER_BANK = NMAX // PMAX
#: the bias of a score masked out (bool mask False, additive mask -inf, causal), in unscaled-score
#: units: finite, so "masked - max" never makes a NaN, and so far below every other score that
#: exp underflows to 0 and a row with no key left is recognisable by its maximum
HARD = 1.0e34
#: finite additive mask values are clamped here (after the division by the scale, which overflows
#: for ``finfo.min``): far below real scores, far above HARD, so a row masked only by finite values
#: keeps them as scores (a uniform softmax for ``finfo.min``, exactly as eager computes it)
SOFT = 1.0e30
#: a row maximum below this means every key of the row is masked out: torch's CPU flash kernel then
#: gives output 0 and logsumexp 0, so the row's gradients are 0 as well
DEAD = -HARD / 2
NEG_F32_MAX = -3.4028234663852886e38  # -float32 max: additive mask values below it are -inf
FLASH_FWD = aten._scaled_dot_product_flash_attention_for_cpu.default
FLASH_BWD = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
#: longest sequence the kernels keep per-head operands for in SBUF (longer ones are decomposed)
MAX_SEQ = 8192


def unsupported(q, k, v, dropout_p: float, attn_mask) -> str | None:
    """Why the flash kernels cannot take this case (None when they can). Called on fake tensors by
    the decomposition table, which then emits the math form instead."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return "not [B, H, S, D]"
    if q.dtype not in (torch.float32, torch.bfloat16, torch.float16) or {k.dtype, v.dtype} != {q.dtype}:
        return f"dtype {q.dtype}"
    if dropout_p:
        return "dropout"
    B, H, Sq, D = q.shape
    if k.shape[:2] != (B, H) or v.shape[:2] != (B, H):
        return "grouped-query heads (expand K/V first)"
    if not (1 <= D <= PMAX) or v.shape[-1] != D or k.shape[-1] != D:
        return f"head dim {D}"
    if not (1 <= Sq <= MAX_SEQ and 1 <= k.shape[2] <= MAX_SEQ) or v.shape[2] != k.shape[2]:
        return "sequence length"
    if attn_mask is not None:
        if attn_mask.dtype not in (torch.bool, torch.float32, torch.bfloat16, torch.float16):
            return f"mask dtype {attn_mask.dtype}"
        if attn_mask.dim() > 4 or broadcast_strides(list(attn_mask.shape), list(attn_mask.stride()),
                                                     [B, H, Sq, k.shape[2]]) is None:
            return "mask shape"
    return None


# ------------------------------------------------------------------------------------ operands
@dataclass
class HeadTensor:
    """A [B, H, S, D]-like HBM operand: its flat span and logical strides."""

    param: HBMTensor
    off: int
    st: tuple[int, ...]

    def rows(self, b, h, s0, rows: int, cols: int, c0: int = 0) -> HBMAccess:
        """[rows, cols] at (s0, c0) of head (b, h): rows on partitions."""
        return HBMAccess(self.param, self.off + b * self.st[0] + h * self.st[1] + s0 * self.st[2]
                         + c0 * self.st[3], ((self.st[2], rows), (self.st[3], cols)))


def head_input(kb: KernelBuilder, src, shape4) -> HeadTensor:
    """A kernel input (a ``Source``) as a [B, H, S, D]-like operand broadcast to ``shape4`` (a mask
    with fewer dims gets stride 0 along the missing ones); integer operands are refused."""
    m = src.meta
    if word_scale(src.base_dtype) != 1:
        raise LoweringError("integer attention operand")
    st = broadcast_strides(list(m.size), list(m.stride), list(shape4))
    if st is None:
        raise LoweringError(f"cannot broadcast {list(m.size)} to {list(shape4)}")
    return HeadTensor(kb.param(src.host, src.base_extent, hw_dtype(src.base_dtype)), m.storage_offset, tuple(st))


def head_output(t: HBMTensor, meta: TensorMeta) -> HeadTensor:
    """A kernel output as a [B, H, S, D]-like operand (the 3-D logsumexp gets a unit last stride)."""
    st = list(meta.stride) + [1] * (4 - len(meta.stride))
    return HeadTensor(t, meta.storage_offset, tuple(st))


def call_args(n: fx.Node, names: list[str], defaults: dict):
    """The op's arguments by name: ``defaults``, then the positional ``n.args`` as ``names``, then
    the keyword arguments."""
    vals = dict(defaults)
    vals.update(zip(names, n.args))
    vals.update(n.kwargs)
    return vals


def call_results(n: fx.Node, out_tensors: dict, out_meta: dict) -> dict[int, tuple[HBMTensor, TensorMeta]]:
    """Result index -> (HBM tensor, metadata) of the op's results the kernel stores (those a
    ``getitem`` user reads outside the kernel)."""
    res = {}
    for u in n.users:
        if u.target is operator.getitem and u in out_tensors:
            res[u.args[1]] = (out_tensors[u], out_meta[u])
    return res


def copy_instr(engine: str, dst: TileRegion, src: TileRegion) -> Instr:
    """A copy (PSUM eviction, SBUF reorder) on ``engine``. ScalarE copies are ``activation(copy)``:
    ``tensor_copy`` on the Scalar engine is not supported on NeuronCore-v2 (trn1), the activation
    copy is on every target, at the same cost."""
    if engine == "scalar":
        return instr_of(INSTRS["activation"], dst, Engine.scalar, op=ActFunc.copy, data=src)
    return instr_of(INSTRS["tensor_copy"], dst, engine, src=src)


def transpose_instr(dst: TileRegion, src: TileRegion, ident: Tile | None) -> Instr:
    """dst = src^T on TensorE. ``nc_transpose`` writes its input's dtype, so a bf16/fp16 block bound
    for a float32 PSUM tile is transposed as a matmul instead: stationary = the block, moving = the
    identity in its dtype (exact: every product is x * 1 or x * 0, accumulated in fp32), at the same
    TensorE cost as ``nc_transpose``. That lets the forward transpose into its consumed score banks
    whatever the operand dtype, instead of holding a PSUM bank of that dtype per query tile."""
    if ident is None or dst.dtype == src.dtype:
        return instr_of(INSTRS["nc_transpose"], dst, Engine.tensor, data=src)
    rows = src.sizes[0]
    return instr_of(INSTRS["nc_matmul"], dst, stationary=src, moving=ident.region(rows, rows), accumulate=False)


class AttnCtx:
    """Shared plumbing of both kernels: engines by role, masks.

    Mask semantics are torch's CPU flash kernel's (what eager runs on CPU): masked-out scores (bool
    False, additive -inf, causal) get -HARD; finite additive values are added as they are (clamped
    at -SOFT); a query row whose every key is masked out yields output 0 and logsumexp 0, hence zero
    gradients (see ``DEAD``)."""

    def __init__(self, kb: KernelBuilder, scale: float, causal: bool, mask: HeadTensor | None,
                 mask_bool: bool) -> None:
        self.kb, self.scale, self.causal, self.mask, self.mask_bool = kb, scale, causal, mask, mask_bool
        self._flip = 0

    @property
    def needs_tmp(self) -> bool:
        """Whether ``bias`` needs its second tile (a causal or -inf part next to the mask)."""
        return self.mask is not None and (self.causal or not self.mask_bool)

    @property
    def rows_may_die(self) -> bool:
        """A mask can leave a query row without keys (causal alone cannot: top-left aligned, query q
        always sees key 0)."""
        return self.mask is not None

    def evict(self, dst: TileRegion, src: TileRegion, engine: str | None = None) -> None:
        """PSUM -> SBUF copies alternate ScalarE / VectorE, which both also carry a score pass;
        ``engine`` pins one where the other is the busier."""
        self._flip ^= 1
        self.kb.add(copy_instr(engine or ("scalar" if self._flip else "vector"), dst, src))

    def needs_mask(self, q0: int, rows: int, k0: int, cols: int) -> bool:
        return self.mask is not None or (self.causal and k0 + cols - 1 > q0)

    def bias(self, tile: Tile, tmp: Tile, b, h, q0: int, rows: int, k0: int, cols: int) -> TileRegion:
        """The additive score bias of block [q0:q0+rows, k0:k0+cols] in unscaled-score units
        (comparisons, maximum and subtract run on VectorE, the only engine that has them)."""
        kb = self.kb
        r = tile.region(rows, cols)
        t = tmp.region(rows, cols) if tmp is not None else None
        if self.mask is not None:
            kb.dma(r, self.mask.rows(b, h, q0, rows, cols, k0))
            if self.mask_bool:   # {0, 1} -> {-HARD, 0}
                kb.tensor_scalar(r, data=r, operand0=1.0, operand1=HARD, op0=AluOp.subtract, op1=AluOp.multiply)
            else:                # -inf -> -HARD; finite m -> max(m / scale, -SOFT)
                kb.tensor_scalar(t, data=r, operand0=NEG_F32_MAX, operand1=-HARD, op0=AluOp.less, op1=AluOp.multiply)
                kb.tensor_scalar(r, data=r, operand0=1.0 / self.scale, operand1=-SOFT, op0=AluOp.multiply,
                                 op1=AluOp.maximum)
                kb.tensor_tensor(r, data1=r, data2=t, op=AluOp.add, engine=Engine.gpsimd)
        if self.causal and k0 + cols - 1 > q0:
            dst = t if self.mask is not None else r
            # value (k - q) = (k0 + f) - (q0 + p) > 0 is masked
            kb.iota(dst, pattern=[[1, cols]], offset=k0 - q0, channel_multiplier=-1)
            kb.tensor_scalar(dst, data=dst, operand0=0.0, operand1=-HARD, op0=AluOp.greater, op1=AluOp.multiply)
            if self.mask is not None:
                kb.tensor_tensor(r, data1=r, data2=dst, op=AluOp.add, engine=Engine.gpsimd)
        return r


def attn_ctx(kb, sources, vals, shape4, D: int) -> AttnCtx:
    """The kernel's :class:`AttnCtx` from the op's arguments: its scale (default ``1 / sqrt(D)``),
    causality and mask."""
    scale = vals.get("scale")
    scale = float(scale) if scale is not None else 1.0 / (D ** 0.5)
    mask_node = vals.get("attn_mask")
    mask, mbool = None, False
    if mask_node is not None:
        mask = head_input(kb, sources[mask_node], shape4)
        mbool = sources[mask_node].base_dtype == "bool"
    return AttnCtx(kb, scale, bool(vals.get("is_causal")), mask, mbool)
