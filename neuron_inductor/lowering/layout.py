"""Layouts: how a logical tensor is addressed inside a kernel's iteration domain.

Every tensor a kernel touches is addressed through strides over its flat HBM span, so broadcasting,
transposes, slices and reshapes of viewable layouts cost nothing. ``domain_strides`` answers "which
stride does this tensor have along each axis of the domain?" (0 = broadcast), or ``None`` when the
tensor cannot be addressed affinely in that domain, in which case the caller splits the kernel.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

from ..ir import TensorMeta

#: torch dtype -> the hardware dtype used to hold it (no 64-bit types on Trainium)
HW_DTYPE: dict[torch.dtype, str] = {
    torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16",
    torch.int32: "int32", torch.int64: "int32", torch.int16: "int16", torch.int8: "int8",
    torch.uint8: "uint8", torch.bool: "uint8",
}
SUPPORTED = frozenset(HW_DTYPE)


class LoweringError(Exception):
    """This group cannot be lowered as formed; the caller splits it or falls back."""


def torch_dtype_name(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


def meta_of(val) -> TensorMeta:
    """TensorMeta of a (fake) tensor."""
    return TensorMeta(tuple(int(s) for s in val.shape), tuple(int(s) for s in val.stride()),
                      int(val.storage_offset()), torch_dtype_name(val.dtype))


def hw_dtype(dtype_name: str) -> str:
    return HW_DTYPE[getattr(torch, dtype_name)]


def word_scale(dtype_name: str) -> int:
    """Hardware elements per logical element: int64 is addressed as pairs of int32 words."""
    return 2 if dtype_name == "int64" else 1


def broadcast_strides(size: Sequence[int], stride: Sequence[int],
                      domain: Sequence[int]) -> list[int] | None:
    """Strides along ``domain`` of a tensor that broadcasts into it (numpy rules), else None."""
    if len(size) > len(domain):
        # leading size-1 dims may be dropped
        extra = len(size) - len(domain)
        if any(s != 1 for s in size[:extra]):
            return None
        size, stride = size[extra:], stride[extra:]
    pad = len(domain) - len(size)
    out = [0] * pad
    for s, st, d in zip(size, stride, domain[pad:]):
        if s == d:
            out.append(st if d != 1 else 0)
        elif s == 1:
            out.append(0)
        else:
            return None
    return out


def reshape_strides(size: Sequence[int], stride: Sequence[int],
                    domain: Sequence[int]) -> list[int] | None:
    """Strides of ``size/stride`` viewed as shape ``domain`` (same numel), if a view exists.

    Same algorithm as ATen's ``computeStride``: walk chunks of dims that are contiguous with each
    other and split them into the new dims.
    """
    numel = math.prod(size)
    if numel != math.prod(domain):
        return None
    if numel == 0:
        return [0] * len(domain)
    new = [0] * len(domain)
    view_d = len(domain) - 1
    chunk_base = stride[-1] if stride else 1
    tensor_numel = 1
    view_numel = 1
    for d in range(len(size) - 1, -1, -1):
        tensor_numel *= size[d]
        if d == 0 or (size[d - 1] != 1 and stride[d - 1] != tensor_numel * chunk_base):
            while view_d >= 0 and (view_numel < tensor_numel or domain[view_d] == 1):
                new[view_d] = view_numel * chunk_base
                view_numel *= domain[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk_base = stride[d - 1]
                tensor_numel = 1
                view_numel = 1
    if view_d != -1:
        # trailing size-1 dims of the view
        while view_d >= 0:
            if domain[view_d] != 1:
                return None
            new[view_d] = 1
            view_d -= 1
    return [0 if d == 1 else s for s, d in zip(new, domain)]


def domain_strides(meta: TensorMeta, domain: Sequence[int]) -> list[int] | None:
    """Strides of a tensor along the axes of ``domain``: broadcast first, then reshape."""
    st = broadcast_strides(meta.size, meta.stride, domain)
    if st is None:
        st = reshape_strides(meta.size, meta.stride, domain)
    return st


def merge_dims(domain: Sequence[int], strides_list: list[list[int]],
               keep_apart: set[int] = frozenset(),
               alone: set[int] = frozenset()) -> tuple[list[int], list[list[int]], list[list[int]]]:
    """Collapse adjacent domain axes that every tensor addresses contiguously.

    Returns the merged domain, each tensor's merged strides, and for each merged axis the original
    axes it covers. Axes in ``keep_apart`` (e.g. reduced axes next to kept ones) never merge with a
    neighbour of the other kind; axes in ``alone`` (a scanned axis) with no neighbour at all.
    """
    groups: list[list[int]] = []
    dom: list[int] = []
    strides: list[list[int]] = [[] for _ in strides_list]
    for ax, size in enumerate(domain):
        if groups:
            prev = groups[-1][-1]
            same_kind = (prev in keep_apart) == (ax in keep_apart) and prev not in alone and ax not in alone
            ok = same_kind and all(st[prev] == st[ax] * size or (st[prev] == 0 and st[ax] == 0)
                                   for st in strides_list)
            if size == 1 and same_kind:
                groups[-1].append(ax)
                continue
            if ok or (dom[-1] == 1 and same_kind):
                for i, st in enumerate(strides_list):
                    strides[i][-1] = st[ax]
                groups[-1].append(ax)
                dom[-1] *= size
                continue
        groups.append([ax])
        dom.append(size)
        for i, st in enumerate(strides_list):
            strides[i].append(st[ax])
    return dom, strides, groups


def refine_domain(domain: Sequence[int], shapes: Sequence[Sequence[int]]) -> list[int]:
    """The coarsest domain that every shape of ``shapes`` (each with ``domain``'s element count) is a
    coarsening of: the union of their axis boundaries. A group whose members view the same elements
    as ``[..., 128]`` and ``[..., 2, 64]`` iterates ``[..., 2, 64]``, where a value broadcast along
    the 2 (stride 0) is addressable; adjacent axes merge again when every access allows."""
    total = math.prod(int(s) for s in domain)
    cuts = set()
    for shape in [domain, *shapes]:
        if math.prod(int(s) for s in shape) != total:
            continue
        acc = 1
        for s in reversed(list(shape)):
            acc *= int(s)
            cuts.add(acc)
    out, prev = [], 1
    for c in sorted(cuts):
        if c == 1:
            continue
        if c % prev:  # [6, 4] and [4, 6]: no common refinement
            return list(domain)
        out.append(c // prev)
        prev = c
    if not total or len(out) <= sum(1 for s in domain if int(s) != 1):
        return list(domain)  # nothing finer than the domain: keep it (and its unit axes) as it is
    return list(reversed(out))
