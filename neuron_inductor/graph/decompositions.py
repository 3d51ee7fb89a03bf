"""The decomposition table: ATen graphs are reduced to a small core op set before fusion.

We start from PyTorch's core-ATen decompositions, add the composite ops that core ATen keeps
(softmax, layer norm, their backwards, var) and our own rewrites that turn index-heavy ops into shapes
the hardware likes: a single-index ``gather``/``scatter`` along the last axis becomes a compare with
an iota (a fused masked reduction / select), and the embedding backward becomes a one-hot matmul on
TensorE instead of a scatter-add.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

aten = torch.ops.aten

_EXTRA = [
    aten._softmax, aten._log_softmax, aten._softmax_backward_data, aten._log_softmax_backward_data,
    aten.native_layer_norm, aten.native_layer_norm_backward, aten.var, aten.var_mean,
    aten.nll_loss_forward, aten.nll_loss_backward, aten.silu, aten.silu_backward,
    aten.gelu_backward, aten.sigmoid_backward, aten.tanh_backward, aten.threshold_backward,
    aten.native_dropout_backward, aten.addmm, aten.baddbmm, aten.linear, aten.t, aten.transpose,
    aten.hardtanh, aten.leaky_relu, aten.softplus, aten.addcmul, aten.addcdiv, aten.lerp,
    aten.logsumexp, aten.std, aten.rsub, aten.clamp_min, aten.clamp_max, aten.mv,
    aten.split_with_sizes, aten.split.Tensor, aten.unbind,
]

_own: dict = {}


def _register(op) -> Callable:
    def deco(fn):
        _own[op] = fn
        return fn
    return deco


def _last_axis(x: torch.Tensor, dim: int) -> bool:
    return dim % max(x.dim(), 1) == x.dim() - 1


@_register(aten.gather.default)
def gather(x: torch.Tensor, dim: int, index: torch.Tensor, *, sparse_grad: bool = False):
    """Pick one element per row along the last axis (the cross-entropy pattern) as a masked sum."""
    if not (_last_axis(x, dim) and index.shape[-1] == 1 and x.dim() == index.dim()):
        return NotImplemented
    iota = aten.arange.start_step(0, x.shape[-1], 1, dtype=torch.int64, device=x.device)
    hit = aten.eq.Tensor(iota, index)
    return aten.sum.dim_IntList(aten.where.self(hit, x, aten.scalar_tensor.default(0, dtype=x.dtype)),
                                [-1], True)


@_register(aten.scatter.value)
def scatter_value(x: torch.Tensor, dim: int, index: torch.Tensor, value):
    """One value per row along the last axis (one-hot construction) as a compare-and-select."""
    if not (_last_axis(x, dim) and index.shape[-1] == 1 and x.dim() == index.dim()):
        return NotImplemented
    iota = aten.arange.start_step(0, x.shape[-1], 1, dtype=torch.int64, device=x.device)
    hit = aten.eq.Tensor(iota, index)
    return aten.where.self(hit, aten.scalar_tensor.default(value, dtype=x.dtype), x)


@_register(aten.embedding_dense_backward.default)
def embedding_dense_backward(grad: torch.Tensor, indices: torch.Tensor, num_weights: int,
                             padding_idx: int, scale_grad_by_freq: bool):
    """d(weight) = onehot(indices)^T @ grad: a TensorE matmul (duplicates accumulate for free)."""
    if scale_grad_by_freq:
        return NotImplemented
    d = grad.shape[-1]
    flat_idx = aten.view.default(indices, [-1, 1])
    iota = aten.arange.start_step(0, num_weights, 1, dtype=torch.int64, device=grad.device)
    onehot = aten.eq.Tensor(flat_idx, iota)
    if padding_idx >= 0:
        onehot = aten.logical_and.default(onehot, aten.ne.Scalar(flat_idx, padding_idx))
    onehot = aten._to_copy.default(onehot, dtype=grad.dtype)
    g = aten.view.default(grad, [-1, d])
    return aten.mm.default(aten.permute.default(onehot, [1, 0]), g)


def decomposition_table() -> dict:
    """Core ATen + the composites above + our own rewrites (ours win)."""
    table = dict(core_aten_decompositions())
    table.update(get_decompositions(_EXTRA))
    # keep ops we lower directly out of the table
    for op in (aten.gelu.default,):
        table.pop(op, None)
    table.update(_own)
    return table
