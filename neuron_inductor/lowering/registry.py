"""Decorator registries that map ATen ops to lowerings.

Three kinds, as in TorchInductor: ``POINTWISE`` (one output element from the same-index elements of
its inputs; fusable), ``REDUCTIONS`` (free-axis reductions; fusable with producers and consumers) and
``KERNELS`` (ops with their own kernel shape: matmul, embedding, concatenation...). An op in none of
them is a declared fallback. ``VIEWS`` are pure metadata ops: they never launch anything.
"""
from __future__ import annotations

from typing import Callable

import torch

from ..user_kernels import lookup

aten = torch.ops.aten

POINTWISE: dict = {}
REDUCTIONS: dict = {}
KERNELS: dict = {}

VIEWS = frozenset({
    aten.view.default, aten._unsafe_view.default, aten.permute.default, aten.expand.default,
    aten.slice.Tensor, aten.select.int, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default,
    aten.unsqueeze.default, aten.alias.default, aten.t.default, aten.transpose.int,
    aten.as_strided.default, aten.diagonal.default, aten.unfold.default,
})

#: views that keep logical element order (a group may compute through them without a copy)
ORDER_PRESERVING_VIEWS = frozenset({
    aten.view.default, aten._unsafe_view.default, aten.squeeze.dim, aten.squeeze.dims,
    aten.squeeze.default, aten.unsqueeze.default, aten.alias.default,
})


def _overloads(op) -> list:
    if isinstance(op, torch._ops.OpOverloadPacket):
        return [getattr(op, o) for o in op.overloads()]
    return [op]


def register(table: dict, *ops) -> Callable:
    def deco(fn):
        for op in ops:
            for o in _overloads(op):
                table[o] = fn
        return fn
    return deco


def register_pointwise(*ops) -> Callable:
    return register(POINTWISE, *ops)


def register_kernel(*ops) -> Callable:
    return register(KERNELS, *ops)


def op_kind(target) -> str:
    """'view', 'pointwise', 'reduction', 'kernel' or 'fallback'."""
    if target in VIEWS:
        return "view"
    if target in POINTWISE:
        return "pointwise"
    if target in REDUCTIONS:
        return "reduction"
    if target in KERNELS or lookup(target) is not None:  # a registered hand-written kernel
        return "kernel"
    return "fallback"
