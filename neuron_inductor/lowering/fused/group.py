"""What a fused kernel is made of, and the kernel-builder checks around lowering one.

``Group`` (the one group type: what the partitioner hands lowering, and what every kernel lowering
reads), where its inputs live (``Source``), the axes of its reductions, and two guards: the SBUF bytes a single-pass kernel actually allocated, and a
snapshot of a ``KernelBuilder`` so a plan that turns out not to fit can be retried with another.
"""
from __future__ import annotations

import copy as copy_module
from dataclasses import dataclass, field
from enum import StrEnum

import torch
import torch.fx as fx

from ...ir import Alloc, Loop, TensorMeta
from ..builder import KernelBuilder


class GroupKind(StrEnum):
    """'fused' (pointwise and reductions), 'matmul' (with its epilogue), 'kernel' (an op with its
    own kernel), 'multi' (independent groups launched as one kernel) or 'fallback' (eager ATen)."""

    fused = "fused"
    matmul = "matmul"
    kernel = "kernel"
    multi = "multi"
    fallback = "fallback"


@dataclass(frozen=True, eq=False)
class Group:
    """A kernel group, as the partitioner hands it to lowering: frozen, its node lists tuples.
    Built by the named constructors (``Group.fused``, ``.matmul``, ``.kernel``, ``.fallback``,
    ``.multi``) or by freezing the partitioner's working ``GroupDraft``."""

    nodes: tuple[fx.Node, ...]    # topological order; views inside are order-preserving
    outputs: tuple[fx.Node, ...]  # values needed outside the group
    domain: tuple[int, ...]
    reduce_axes: frozenset[int] = frozenset()
    kind: GroupKind = GroupKind.fused
    name: str = ""
    #: axes summed over partitions (across row tiles) beside the free-axis ``reduce_axes``
    col_axes: frozenset[int] = frozenset()
    reason: str = ""
    members: frozenset = frozenset()
    #: groups folded into this one, kept as they were so lowering can fall back to them
    parts: tuple["Group", ...] = ()

    def __post_init__(self) -> None:
        for name, conv in (("nodes", tuple), ("outputs", tuple), ("domain", tuple), ("parts", tuple),
                           ("reduce_axes", frozenset), ("col_axes", frozenset), ("members", frozenset),
                           ("kind", GroupKind)):
            object.__setattr__(self, name, conv(getattr(self, name)))

    @staticmethod
    def fused(nodes, outputs, domain, reduce_axes=frozenset(), col_axes=frozenset(), members=None) -> "Group":
        return Group(nodes, outputs, domain, reduce_axes, GroupKind.fused, col_axes=col_axes,
                     members=frozenset(nodes) if members is None else members)

    @staticmethod
    def matmul(nodes, outputs, domain) -> "Group":
        return Group(nodes, outputs, domain, kind=GroupKind.matmul, members=frozenset(nodes))

    @staticmethod
    def kernel(nodes, outputs) -> "Group":
        return Group(nodes, outputs, (), kind=GroupKind.kernel, members=frozenset(nodes))

    @staticmethod
    def fallback(nodes, outputs, reason: str) -> "Group":
        return Group(nodes, outputs, (), kind=GroupKind.fallback, reason=reason, members=frozenset(nodes))

    @staticmethod
    def multi(parts) -> "Group":
        nodes = [n for p in parts for n in p.nodes]
        return Group(nodes, [o for p in parts for o in p.outputs], (), kind=GroupKind.multi, parts=parts,
                     members=frozenset(nodes))


@dataclass(eq=False)
class GroupDraft:
    """The partitioner's working record of a group while it grows (same fields as ``Group``);
    ``freeze`` makes the ``Group`` lowering reads."""

    nodes: list[fx.Node]
    outputs: list[fx.Node]
    domain: tuple[int, ...]
    reduce_axes: frozenset[int] = frozenset()
    kind: str = "fused"
    name: str = ""
    col_axes: frozenset[int] = frozenset()
    reason: str = ""
    members: set = field(default_factory=set)
    parts: list = field(default_factory=list)

    def freeze(self) -> Group:
        return Group(self.nodes, self.outputs, self.domain, self.reduce_axes, self.kind, self.name,
                     self.col_axes, self.reason, self.members, tuple(p.freeze() for p in self.parts))


#: the name kernel lowerings use for the group they are handed
FusedGroup = Group


def last_axis(domain) -> int:
    """The innermost non-unit axis: where row reductions of row-major tensors run."""
    return max([i for i, s in enumerate(domain) if s > 1], default=len(domain) - 1)


def col_pair(domain, row: frozenset, col: frozenset) -> bool:
    """Reductions over ``col`` can be column sums beside row reductions over ``row`` (possibly none):
    disjoint sets, with row reductions covering every other non-unit axis, and the axes ``col`` keeps
    coming after the ones it sums (its result is one free-axis vector)."""
    big = {i for i, s in enumerate(domain) if s > 1}
    kept = big - col
    if row & col or not (big & col) or (row and not big <= row | col):
        return False
    return not kept or min(kept) > max(big & col)


@dataclass(eq=False)
class Source:
    """Where a value outside the kernel lives: a host buffer and the value's layout in it."""

    host: str
    meta: TensorMeta          # offset relative to the start of the host buffer's flat span
    base_extent: int          # logical elements of the host buffer's flat span
    base_dtype: str           # torch dtype name of the host buffer


def reduce_dims(node: fx.Node) -> tuple[list[int], bool]:
    """(reduced input dims, keepdim) of a reduction node."""
    x = node.args[0].meta["val"]
    nd = max(x.dim(), 1)
    args = list(node.args[1:])
    kw = node.kwargs
    if node.target._overloadpacket in (torch.ops.aten.sum, torch.ops.aten.mean, torch.ops.aten.prod,
                                       torch.ops.aten.any, torch.ops.aten.all) and not args \
            and "dim" not in kw:
        return list(range(x.dim())), False
    dims = args[0] if args else kw.get("dim", [])
    if dims is None or dims == []:
        dims = list(range(x.dim()))
    if isinstance(dims, int):
        dims = [dims]
    keep = args[1] if len(args) > 1 else kw.get("keepdim", False)
    if x.dim() == 0:  # dim 0 / -1 of a 0-d tensor names the tensor itself: nothing is reduced
        return [], bool(keep)
    return sorted({d % nd for d in dims}), bool(keep)




def sbuf_peak(body: list) -> int:
    """SBUF bytes per partition live at once: a block's tiles plus its worst nested loop's."""
    own = sum(s.tile.bytes_per_partition for s in body if isinstance(s, Alloc) and s.tile.memory == "sbuf")
    return own + max([sbuf_peak(s.body) for s in body if isinstance(s, Loop)], default=0)


def builder_snapshot(kb: KernelBuilder) -> tuple:
    """The builder's state, taken in the block being emitted (the kernel's body, or the scope of one
    part of a multi-part kernel)."""
    return (copy_module.deepcopy(kb.names), dict(kb.params), list(kb.outputs), list(kb._blocks[-1]),
            kb.plan, len(kb._blocks))


def builder_restore(kb: KernelBuilder, snap: tuple) -> None:
    kb.names, kb.params, kb.outputs, body, kb.plan, depth = snap
    del kb._blocks[depth:], kb._pools[depth:]
    kb._blocks[-1][:] = body
    kb._pools[-1] = {}
