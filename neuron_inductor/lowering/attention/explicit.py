"""Explicit softmax attention, ``softmax(q @ k^T * scale, -1) @ v`` written out as matmuls and a softmax,
on the flash forward kernel: ``neuron_inductor::softmax_attention``.

``graph/attention_pattern.py`` rewrites the traced form (two ``bmm`` around a decomposed softmax, K/V
heads possibly repeated by ``repeat_interleave``) into this op when its semantics are exactly the
op's; the math form stores the whole score matrix to HBM and reads it back (twice, in fp32), this
kernel keeps it on chip (online softmax, ``forward.py``). Grouped-query heads are read in place: query
head h uses K/V head h // (H / KH), as ``repeat_interleave`` lays them out, so the repeat is never
materialised.

Semantics are eager's for the explicit form, not torch's CPU flash kernel's: the kernel runs in strict
mode (``forward._Sanitizer``): Q and K rows are made finite before TensorE transposes them and their
non-finite flags put NaN back where eager has it (any NaN/Inf in a query row makes that output row NaN;
a NaN in a key row makes every row NaN). The one difference left is an infinite (not NaN) key element:
eager keeps the query rows whose product with it is -inf (the key drops out of their softmax) and gives
NaN elsewhere; the kernel gives NaN on every row. No mask is taken (an additive mask row of all -inf
is NaN in eager and 0 in the flash kernel), nor dropout: such graphs are not rewritten.

Online softmax changes the order of the sums (and the scale is a multiply by 1 / c where the explicit
form divides by c): results agree with eager to the tolerance the flash kernels are held to
(``tests/lowering/test_attention.py``, ``tests/lowering/test_attention_pattern.py``).
"""
from __future__ import annotations

import torch

from ..layout import LoweringError, hw_dtype
from ..registry import KernelContext, register_lowering
from .common import MAX_SEQ, PMAX, AttnCtx, head_input, head_output
from .forward import FwdEmitter, plan_fwd


@torch.library.custom_op("neuron_inductor::softmax_attention", mutates_args=())
def softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Reference (eager): ``softmax(q @ k^T * scale, -1) @ v`` with q [B, H, Sq, D], k and v
    [B, KH, Sk, D] and query head h reading K/V head h // (H / KH)."""
    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    return torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1) @ v


@softmax_attention.register_fake
def _(q, k, v, scale):
    return q.new_empty(q.shape[:-1] + (v.shape[-1],))


SOFTMAX_ATTENTION = torch.ops.neuron_inductor.softmax_attention.default


def unsupported(q, k, v) -> str | None:
    """Why the kernel cannot take these (fake) operands: None when it can."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return "not [B, H, S, D]"
    if q.dtype not in (torch.float32, torch.bfloat16) or k.dtype != q.dtype or v.dtype != q.dtype:
        return f"dtype {q.dtype}"
    B, H, Sq, D = q.shape
    if k.shape[0] != B or v.shape[0] != B or k.shape[1] != v.shape[1] or k.shape[1] < 1 or H % k.shape[1]:
        return "heads"
    if not (1 <= D <= PMAX) or k.shape[-1] != D or v.shape[-1] != D:
        return f"head dim {D}"
    if not (1 <= Sq <= MAX_SEQ and 1 <= k.shape[2] <= MAX_SEQ) or v.shape[2] != k.shape[2]:
        return "sequence length"
    if 0 in q.shape or 0 in k.shape:
        return "empty"
    return None


@register_lowering(SOFTMAX_ATTENTION, kind="kernel")
def lower_softmax_attention(ctx: KernelContext, *args) -> None:
    n, sources, kb, out_tensors, out_meta, cfg = ctx.unpack()
    qn, kn, vn, scale = n.args
    qv, kv, vv = (x.meta["val"] for x in (qn, kn, vn))
    why = unsupported(qv, kv, vv)
    if why:
        raise LoweringError(f"softmax attention: {why}")
    if n not in out_tensors:
        raise LoweringError("softmax attention without a stored result")
    B, H, Sq, D = (int(x) for x in qv.shape)
    KH, Sk = int(kv.shape[1]), int(kv.shape[2])
    actx = AttnCtx(kb, float(scale), False, None, False)
    q = head_input(kb, sources[qn], (B, H, Sq, D))
    k, v = (head_input(kb, sources[x], (B, KH, Sk, D)) for x in (kn, vn))
    out = head_output(out_tensors[n], out_meta[n])
    plan = plan_fwd(actx, kb.target.psum_banks, (B, H, Sq, Sk, D), hw_dtype(sources[qn].base_dtype),
                    out_tensors[n].dtype)
    kb.plan = (f"explicit softmax attention (strict: eager's non-finite rows){'' if KH == H else f', {H // KH} query heads per K/V head'}; "
               + plan.describe(False))
    FwdEmitter(kb, actx, plan, (q, k, v), out, None, strict=True, rep=H // KH).emit()
