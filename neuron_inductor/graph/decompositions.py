"""The decomposition table: ATen graphs are reduced to a small core op set before fusion.

We start from PyTorch's core-ATen decompositions, add the composite ops that core ATen keeps
(softmax, layer norm, their backwards, var) and our own rewrites that turn index-heavy ops into shapes
the hardware likes: ``gather``/``scatter``/``scatter_add`` (decompositions_gather.py) and a
single-value ``scatter`` become compares with an iota (fused masked reductions / selects),
``max.dim``/``argmax``/small-k ``topk`` become fused max-and-first-index reductions
(decompositions_select.py), the random ops a counter-based hash (decompositions_random.py), and the
embedding backward becomes a one-hot matmul on TensorE instead of a scatter-add.
"""
from __future__ import annotations

import functools
import math
from typing import Callable

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

from .decompositions_gather import GATHER_DECOMPOSITIONS, index_put_accumulate
from .decompositions_random import RANDOM_DECOMPOSITIONS
from .decompositions_select import SELECT_DECOMPOSITIONS

aten = torch.ops.aten
_FLASH = aten._scaled_dot_product_flash_attention_for_cpu.default
_FLASH_BWD = aten._scaled_dot_product_flash_attention_for_cpu_backward.default


def supports(op, *args, **kwargs) -> bool | str:
    """Whether ``op``'s registered lowering takes these (fake) arguments: the registry's answer
    (``lowering/registry.py``), so a case the kernel would refuse is decomposed instead."""
    from ..lowering import registry  # importing the lowering package registers every lowering

    return registry.supports(op, *args, **kwargs)


_EXTRA = [
    aten._softmax, aten._log_softmax, aten._softmax_backward_data, aten._log_softmax_backward_data,
    aten.native_layer_norm, aten.native_layer_norm_backward, aten.var, aten.var_mean,
    aten.nll_loss_forward, aten.nll_loss_backward, aten.silu, aten.silu_backward,
    aten.gelu_backward, aten.sigmoid_backward, aten.tanh_backward, aten.threshold_backward,
    aten.native_dropout_backward, aten.addmm, aten.baddbmm, aten.linear, aten.t, aten.transpose,
    aten.hardtanh, aten.leaky_relu, aten.softplus, aten.addcmul, aten.addcdiv, aten.lerp,
    aten.logsumexp, aten.std, aten.rsub, aten.clamp_min, aten.clamp_max, aten.mv,
    aten.split_with_sizes, aten.split.Tensor, aten.unbind, aten.linalg_vector_norm,
]

_own: dict = {}


def _register(op) -> Callable:
    def deco(fn):
        _own[op] = fn
        return fn
    return deco


def _last_axis(x: torch.Tensor, dim: int) -> bool:
    return dim % max(x.dim(), 1) == x.dim() - 1


@_register(aten.scatter.value)
def scatter_value(x: torch.Tensor, dim: int, index: torch.Tensor, value):
    """One value per row along the last axis (one-hot construction) as a compare-and-select."""
    if not (_last_axis(x, dim) and index.shape[-1] == 1 and x.dim() == index.dim()):
        return NotImplemented
    iota = aten.arange.start_step(0, x.shape[-1], 1, dtype=torch.int64, device=x.device)
    hit = aten.eq.Tensor(iota, index)
    return aten.where.self(hit, aten.scalar_tensor.default(value, dtype=x.dtype), x)


@_register(aten.new_empty_strided.default)
def new_empty_strided(x: torch.Tensor, size, stride, *, dtype=None, layout=None, device=None,
                      pin_memory=None):
    """Uninitialised memory (an autograd buffer, e.g. gpt-oss's backward, or the target of a
    functionalized copy into a transposed view, e.g. qwen3_5's gated-delta rule): ``empty``
    (lowered as a free constant) when the strides are contiguous, ``empty`` in the dense order of
    the strides permuted back when they are a permutation of a contiguous layout; other strides
    (gaps, overlaps) stay with the fallback."""
    size, stride = [int(s) for s in size], [int(s) for s in stride]
    order = sorted(range(len(size)), key=lambda d: (-stride[d], -size[d]))  # outermost first
    expect, acc = [0] * len(size), 1
    for d in reversed(order):
        expect[d] = acc
        acc *= max(size[d], 1)
    if any(e != s for d, (e, s) in enumerate(zip(expect, stride)) if size[d] > 1):
        return NotImplemented
    dense = aten.empty.memory_format([size[d] for d in order], dtype=dtype or x.dtype,
                                     device=device or x.device)
    if order == sorted(order):
        return dense
    return aten.permute.default(dense, [order.index(d) for d in range(len(size))])


@_register(aten.embedding_dense_backward.default)
def embedding_dense_backward(grad: torch.Tensor, indices: torch.Tensor, num_weights: int,
                             padding_idx: int, scale_grad_by_freq: bool):
    """d(weight) = onehot(indices)^T @ grad: a TensorE matmul (duplicates accumulate for free).
    ``grad`` may arrive with permuted strides (the gradient of ``embedding(...).permute(...)``), so
    it is reshaped to rows, which copies where no view exists.

    Eager adds each gradient row into its token's row only, so a NaN or inf reaches just the rows of
    the tokens it came from; in the matmul every row would take ``0 * NaN``. The matmul therefore
    runs on the finite values, and a second one counts, per weight element, the +inf and -inf (a NaN
    counts as both) that eager's sum would add: both -> NaN, one -> that infinity (the counts are
    exact integers in PSUM's fp32; only their sign is read)."""
    if scale_grad_by_freq:
        return NotImplemented
    d = grad.shape[-1]
    flat_idx = aten.reshape.default(indices, [-1, 1])
    iota = aten.arange.start_step(0, num_weights, 1, dtype=torch.int64, device=grad.device)
    onehot = aten.eq.Tensor(flat_idx, iota)
    if padding_idx >= 0:
        onehot = aten.logical_and.default(onehot, aten.ne.Scalar(flat_idx, padding_idx))
    onehot_t = aten.permute.default(aten._to_copy.default(onehot, dtype=grad.dtype), [1, 0])
    g = aten.reshape.default(grad, [-1, d])
    finite = aten.isfinite.default(g)
    out = aten.mm.default(onehot_t, aten.where.self(finite, g, aten.zeros_like.default(g)))
    nan = aten.isnan.default(g)
    up = aten.logical_or.default(nan, aten.eq.Scalar(g, math.inf))
    down = aten.logical_or.default(nan, aten.eq.Scalar(g, -math.inf))
    flags = aten._to_copy.default(aten.cat.default([up, down], 1), dtype=grad.dtype)
    counts = aten.mm.default(onehot_t, flags)
    up_n = aten.gt.Scalar(aten.slice.Tensor(counts, 1, 0, d), 0)
    down_n = aten.gt.Scalar(aten.slice.Tensor(counts, 1, d, 2 * d), 0)
    out = aten.where.ScalarSelf(down_n, -math.inf, out)
    out = aten.where.ScalarSelf(up_n, math.inf, out)
    return aten.where.ScalarSelf(aten.logical_and.default(up_n, down_n), math.nan, out)


def _var_and_mean(x: torch.Tensor, dim, correction, keepdim: bool):
    dims = list(range(x.dim())) if dim is None or len(dim) == 0 else [d % max(x.dim(), 1) for d in dim]
    n = 1
    for d in dims:
        n *= x.shape[d]
    c = 1 if correction is None else correction
    mean = aten.mean.dim(x, dims, True)
    diff = aten.sub.Tensor(x, mean)
    var = aten.div.Scalar(aten.sum.dim_IntList(aten.mul.Tensor(diff, diff), dims, keepdim), max(n - c, 0))
    return var, (mean if keepdim else aten.squeeze.dims(mean, dims))


@_register(aten.var_mean.correction)
def var_mean(x: torch.Tensor, dim=None, *, correction=None, keepdim: bool = False):
    """In ATen ops we lower: torch's ref emits prims.var/sum/broadcast_in_dim, which would fall back
    (inference graphs of every LayerNorm model: layer_norm -> var_mean)."""
    if not x.is_floating_point():
        return NotImplemented
    return _var_and_mean(x, dim, correction, keepdim)


@_register(aten.var.correction)
def var(x: torch.Tensor, dim=None, *, correction=None, keepdim: bool = False):
    if not x.is_floating_point():
        return NotImplemented
    return _var_and_mean(x, dim, correction, keepdim)[0]


@_register(aten.native_layer_norm.default)
def native_layer_norm(x: torch.Tensor, normalized_shape, weight, bias, eps: float):
    """LayerNorm in ATen ops we lower. torch's ref computes var_mean through prims (prims.var,
    broadcast_in_dim) in no-grad/inference graphs, which had no lowering and ran on the host."""
    if not x.is_floating_point():
        return NotImplemented
    dims = list(range(x.dim() - len(normalized_shape), x.dim()))
    xf = aten._to_copy.default(x, dtype=torch.float32) if x.dtype != torch.float32 else x
    var, mean = _var_and_mean(xf, dims, 0, True)
    rstd = aten.rsqrt.default(aten.add.Scalar(var, eps))
    out = aten.mul.Tensor(aten.sub.Tensor(xf, mean), rstd)
    if weight is not None:
        out = aten.mul.Tensor(out, weight)
    if bias is not None:
        out = aten.add.Tensor(out, bias)
    if x.dtype != torch.float32:
        out = aten._to_copy.default(out, dtype=x.dtype)
        mean = aten._to_copy.default(mean, dtype=x.dtype)
        rstd = aten._to_copy.default(rstd, dtype=x.dtype)
    return out, mean, rstd


def _leading_indices(x: torch.Tensor, indices) -> list | None:
    """The integer index tensors of ``x[i0, i1, ...]`` on leading dims (no slices, no masks)."""
    if not indices or len(indices) > x.dim():
        return None
    if any(i is None or i.dtype not in (torch.int64, torch.int32) for i in indices):
        return None
    return list(indices)


@_register(aten.index.Tensor)
def index_rows(x: torch.Tensor, indices):
    """``x[i0, i1, ...]`` with integer indices on the leading dims as one row gather.

    MoE expert selection (``weights[expert_ids]``) and Hugging Face's mask construction
    (``mask[batch_idx, kv_idx]`` with broadcast index tensors) both have this shape: the indices
    broadcast together and combine into one flat row index into ``x`` viewed as [rows, rest].
    """
    idx = _leading_indices(x, indices)
    if idx is None:
        return _index_one_dim(x, indices)
    k = len(idx)
    lead, rest = list(x.shape[:k]), list(x.shape[k:])
    flat = None
    for j, i in enumerate(idx):
        i = aten.where.self(aten.lt.Scalar(i, 0), aten.add.Tensor(i, lead[j]), i)  # wrap negatives
        scale = 1
        for s in lead[j + 1:]:
            scale *= s
        term = aten.mul.Tensor(i, scale) if scale != 1 else i
        flat = term if flat is None else aten.add.Tensor(flat, term)
    out_shape = list(torch.broadcast_shapes(*[tuple(i.shape) for i in idx]))
    rows_of = torch.ops.aten.reshape.default(x, [-1] + rest) if k > 1 else x
    rows = aten.index_select.default(rows_of, 0, aten.view.default(flat, [-1]))
    return aten.view.default(rows, out_shape + rest)


def _index_one_dim(x: torch.Tensor, indices):
    """``x[:, ..., i]``: a single integer index tensor after full slices (Falcon splits its fused
    QKV with ``qkv[..., [-2]]``) is ``index_select`` along that dim, the index's own dims taking
    its place; any other mix of slices and indices stays NotImplemented (a declared fallback)."""
    k = len(indices) - 1
    i = indices[-1] if indices else None
    if k < 1 or k >= x.dim() or any(j is not None for j in indices[:-1]) or i is None \
            or i.dtype not in (torch.int64, torch.int32):
        return NotImplemented
    i = aten.where.self(aten.lt.Scalar(i, 0), aten.add.Tensor(i, x.shape[k]), i)  # wrap negatives
    out = aten.index_select.default(x, k, aten.view.default(i, [-1]))
    return aten.view.default(out, list(x.shape[:k]) + list(i.shape) + list(x.shape[k + 1:]))


_register(aten.index_put.default)(index_put_accumulate)  # the one-hot matmul scatter


def _sdpa_scores(q, k, attn_mask, is_causal: bool, scale):
    """scale * q @ k^T + mask in fp32, as torch's CPU flash kernel forms them: causal top-left
    aligned, masked-out scores (bool False, causal) -inf, additive masks added as they are."""
    sc = scale if scale is not None else 1.0 / (q.shape[-1] ** 0.5)
    k = _sdpa_gqa_v(q, k)
    qf, kf = (aten._to_copy.default(x, dtype=torch.float32) for x in (q, k))
    s = aten.mul.Tensor(aten.matmul.default(qf, aten.transpose.int(kf, -2, -1)), sc)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            s = aten.where.self(attn_mask, s, aten.scalar_tensor.default(float("-inf")))
        else:
            s = aten.add.Tensor(s, aten._to_copy.default(attn_mask, dtype=torch.float32))
    if is_causal:
        L, S = q.shape[-2], k.shape[-2]
        keep = aten.ge.Tensor(aten.view.default(aten.arange.default(L, device=q.device), [L, 1]),
                              aten.arange.default(S, device=q.device))
        s = aten.where.self(keep, s, aten.scalar_tensor.default(float("-inf")))
    return s


def _sdpa_gqa_v(q, v):
    """K or V with its heads repeated to the query heads (grouped-query attention)."""
    if v.shape[1] != q.shape[1]:
        return aten.repeat_interleave.self_int(v, q.shape[1] // v.shape[1], 1)
    return v


def _gqa_sum(g, kv_heads: int):
    """The gradient of repeated K/V heads summed back onto the shared heads."""
    B, H, S, D = g.shape
    if H == kv_heads:
        return g
    return aten.sum.dim_IntList(aten.view.default(g, [B, kv_heads, H // kv_heads, S, D]), [2])


def _gqa_flash(q, k, v, dropout_p, attn_mask) -> bool:
    """Grouped-query heads the flash kernel takes once K and V are repeated to the query heads."""
    if k.dim() != 4 or q.dim() != 4 or k.shape[1] == q.shape[1] or q.shape[1] % k.shape[1]:
        return False
    return supports(_FLASH, q, _sdpa_gqa_v(q, k), _sdpa_gqa_v(q, v), dropout_p, attn_mask=attn_mask) is True


@_register(aten._scaled_dot_product_flash_attention_for_cpu.default)
def flash_attention_cpu(q, k, v, dropout_p: float = 0.0, is_causal: bool = False, *, attn_mask=None,
                        scale=None):
    """Kept whole (our flash kernel, lowering/attention/) when the kernel takes the case; grouped-
    query heads go to the kernel with K and V repeated; anything else becomes math with torch's CPU
    flash semantics and a real logsumexp, so its backward (below) still has what it needs.

    Those semantics, for a query row: m = max of its scores, l = sum exp(s - m), out = sum exp(s - m) v
    / l, lse = m + log l; a row whose every score is -inf gets m = 0, l = 1, hence out = 0 and
    lse = 0 (and zero gradients). Finite masks such as finfo.min are plain arithmetic: a row masked
    only by them is a uniform average, and its backward (P = exp(s - lse) with lse rounded to s) is
    what torch's kernel computes too."""
    if supports(_FLASH, q, k, v, dropout_p, is_causal, attn_mask=attn_mask, scale=scale) is True:
        return NotImplemented
    if dropout_p:
        return _CORE_FLASH(q, k, v, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)
    if _gqa_flash(q, k, v, dropout_p, attn_mask):
        return aten._scaled_dot_product_flash_attention_for_cpu.default(
            q, _sdpa_gqa_v(q, k), _sdpa_gqa_v(q, v), dropout_p, is_causal, attn_mask=attn_mask, scale=scale)
    s = _sdpa_scores(q, k, attn_mask, is_causal, scale)
    m = aten.amax.default(s, [-1], True)
    m = aten.where.self(aten.eq.Scalar(m, float("-inf")), aten.scalar_tensor.default(0.0), m)
    e = aten.exp.default(aten.sub.Tensor(s, m))
    l = aten.sum.dim_IntList(e, [-1], True)
    l = aten.where.self(aten.eq.Scalar(l, 0.0), aten.scalar_tensor.default(1.0), l)
    vf = aten._to_copy.default(_sdpa_gqa_v(q, v), dtype=torch.float32)
    out = aten.div.Tensor(aten.matmul.default(e, vf), l)
    lse = aten.squeeze.dim(aten.add.Tensor(m, aten.log.default(l)), -1)
    return aten._to_copy.default(out, dtype=q.dtype), lse


@_register(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def flash_attention_cpu_backward(grad_out, q, k, v, out, lse, dropout_p: float, is_causal: bool, *,
                                 attn_mask=None, scale=None):
    """FA-2 gradients (the flash kernel's, or in ATen ops for the cases it does not take); P =
    exp(s - lse) is 0 on rows left without keys, whose lse is 0."""
    if supports(_FLASH_BWD, grad_out, q, k, v, out, lse, dropout_p, is_causal, attn_mask=attn_mask,
                scale=scale) is True or dropout_p:
        return NotImplemented
    if _gqa_flash(q, k, v, dropout_p, attn_mask):
        dq, dk, dv = aten._scaled_dot_product_flash_attention_for_cpu_backward.default(
            grad_out, q, _sdpa_gqa_v(q, k), _sdpa_gqa_v(q, v), out, lse, dropout_p, is_causal,
            attn_mask=attn_mask, scale=scale)
        return dq, _gqa_sum(dk, k.shape[1]), _gqa_sum(dv, v.shape[1])
    sc = scale if scale is not None else 1.0 / (q.shape[-1] ** 0.5)
    f32 = torch.float32
    s = _sdpa_scores(q, k, attn_mask, is_causal, scale)
    p = aten.exp.default(aten.sub.Tensor(s, aten.unsqueeze.default(lse, -1)))
    do, o = (aten._to_copy.default(x, dtype=f32) for x in (grad_out, out))
    vf = aten._to_copy.default(_sdpa_gqa_v(q, v), dtype=f32)
    kf = aten._to_copy.default(_sdpa_gqa_v(q, k), dtype=f32)
    qf = aten._to_copy.default(q, dtype=f32)
    dv = aten.matmul.default(aten.transpose.int(p, -2, -1), do)
    dp = aten.matmul.default(do, aten.transpose.int(vf, -2, -1))
    di = aten.sum.dim_IntList(aten.mul.Tensor(do, o), [-1], True)
    ds = aten.mul.Tensor(aten.mul.Tensor(p, aten.sub.Tensor(dp, di)), sc)
    dq = aten.matmul.default(ds, kf)
    dk = aten.matmul.default(aten.transpose.int(ds, -2, -1), qf)
    dk, dv = _gqa_sum(dk, k.shape[1]), _gqa_sum(dv, v.shape[1])
    return tuple(aten._to_copy.default(x, dtype=q.dtype) for x in (dq, dk, dv))


def _CORE_FLASH(*args, **kwargs):
    """torch's own math decomposition of the CPU flash op, looked up in its registry when first
    needed (materialising the whole core table at import costs a compile ~0.05 s)."""
    from torch._decomp import decomposition_table as registry
    return registry[_FLASH](*args, **kwargs)


@functools.lru_cache(maxsize=None)
def decomposition_table() -> dict:
    """Core ATen + the composites above + our own rewrites (ours win).

    Built once per process (materialising torch's core table is ~0.1 s, on every compile's warm
    path otherwise); callers must not mutate it."""
    table = dict(core_aten_decompositions())
    table.update(get_decompositions(_EXTRA))
    # keep ops we lower directly out of the table
    for op in (aten.gelu.default,):
        table.pop(op, None)
    table.update(GATHER_DECOMPOSITIONS)
    table.update(SELECT_DECOMPOSITIONS)
    table.update(RANDOM_DECOMPOSITIONS)
    table.update(_own)
    from .conv import DECOMPOSITIONS as conv  # 2-D convolutions as matmuls (patch / im2col)
    from .group_norm import DECOMPOSITIONS as group_norm
    from .resample import DECOMPOSITIONS as resample  # nearest upsampling as index_selects
    from .decompositions_math import DECOMPOSITIONS as math_ops  # isnan/isinf, exp2/log2/log10
    table.update(conv)
    table.update(group_norm)
    table.update(resample)
    table.update(math_ops)
    from .decompositions_logical import DECOMPOSITIONS as logical  # any / all over x != 0
    table.update(logical)
    from .decompositions_linalg import DECOMPOSITIONS as linalg  # solve_triangular by substitution
    table.update(linalg)
    return table
