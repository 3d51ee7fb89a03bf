"""The lowering registry: which ATen ops have a lowering, of which kind, and whether it takes a case.

The one way in is :func:`register_lowering`::

    @register_lowering(aten.cumsum.default, kind="kernel", supports=my_supports)
    def lower_cumsum(ctx: KernelContext, x, dim, dtype=None) -> None: ...

Three kinds, as in TorchInductor:

* ``"pointwise"``: one output element from the same-index elements of its inputs; fusable. The
  function is ``fn(tile_ctx, node, *args)`` and returns the result tile (see ``pointwise.py``); it runs
  inside a fused kernel's loop nest.
* ``"reduction"``: a free-axis reduction, fusable with producers and consumers; what is registered is
  its combine spec ``(alu_op, identity)``: ``register_lowering(aten.sum.default,
  kind="reduction")(("add", 0.0))``.
* ``"group"``: a lowering of a whole group rather than one op, keyed by the group's kind
  (``"fused"``: pointwise ops and reductions in one loop nest) or matmul variant (``"matmul_multi"``:
  sibling GEMMs sharing an epilogue; ``"matmul_rows"``: a GEMM inside a row-reducing fused kernel).
  The function is ``fn(ctx)``; ``ctx.node`` is the group's first node.
* ``"kernel"``: an op with its own kernel shape (matmul, embedding, concatenation, attention...).
  The function is ``fn(ctx, *args)``: one :class:`KernelContext` (the node, its group, sources,
  outputs, builder, config, target), then the op's ATen arguments bound from its schema with
  defaults applied (:func:`bind_args`: ``fx.Node`` for tensors, Python values for the rest). It emits
  the kernel body into ``ctx.builder``; it raises ``LoweringError`` for a case it cannot take (the op
  then becomes a declared fallback).

``supports(*args, **kwargs) -> bool | str`` (optional, any kind) answers "can this lowering take
these arguments?" on traced values (fake tensors, scalars) *before* lowering: ``True`` yes, ``False``
or a reason string no. The decomposition table asks it through :func:`supports` (so an op the kernel
would refuse is decomposed instead), and the partitioner through :func:`node_unsupported` (the node
becomes a declared fallback with that reason).

Epilogues: a kernel registered with ``epilogue=True`` (matmul) is the anchor of its group, and the
partitioner fuses pointwise consumers of its output (same shape) into the group. Its lowering then
receives them in ``ctx.group.nodes`` (the anchor first, the consumers in topological order) and
``ctx.group.outputs`` (what leaves the kernel: the anchor's value and/or epilogue values), and must
apply them to each output tile before storing it (matmul does so with the fused-group emitter).

An op in no table is a declared fallback. ``VIEWS`` are pure metadata ops: they never launch
anything. The kind tables (``POINTWISE``, ``REDUCTIONS``, ``KERNELS``) are views of the registry for
readers; only :func:`register_lowering` writes them (tests/test_architecture.py checks it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Union

import torch
import torch.fx as fx

from ..user_kernels import is_nki_hop, lookup

if TYPE_CHECKING:
    from ..config import Config
    from ..ir import HBMTensor, TensorMeta
    from ..target import Target
    from .builder import KernelBuilder
    from .fused.group import Group, Source

aten = torch.ops.aten

POINTWISE: dict = {}
REDUCTIONS: dict = {}
KERNELS: dict = {}
#: group lowerings, keyed by group kind (``"fused"``) or matmul variant (``"matmul_multi"``, ...)
GROUPS: dict = {}

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


KINDS = ("pointwise", "reduction", "kernel", "group")
_TABLES = {"pointwise": POINTWISE, "reduction": REDUCTIONS, "kernel": KERNELS, "group": GROUPS}

Supports = Callable[..., Union[bool, str, None]]


@dataclass(frozen=True)
class KernelContext:
    """Everything a kernel lowering reads, in one object."""

    node: fx.Node                             # the op being lowered (the group's anchor)
    group: "Group"                            # its group (epilogue nodes for ``epilogue=True``)
    sources: "Mapping[fx.Node, Source]"       # where each value read from outside the kernel lives
    outputs: "Mapping[fx.Node, HBMTensor]"    # the kernel's output tensors, by the value they hold
    out_meta: "Mapping[fx.Node, TensorMeta]"  # the layout each output is stored in
    builder: "KernelBuilder"                  # emits the kernel body
    config: "Config"
    target: "Target"

    def unpack(self) -> tuple:
        """``(node, sources, builder, outputs, out_meta, config)``, for lowerings that still read
        their arguments from the node."""
        return self.node, self.sources, self.builder, self.outputs, self.out_meta, self.config


def bind_args(node: fx.Node) -> tuple:
    """``node``'s ATen arguments in schema order, keyword-only ones included, each taken from the
    call or else from the schema's default (``aten.cumsum(x, 1)`` -> ``(x, 1, None)``). Nodes whose
    target has no schema get their positional arguments."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return tuple(node.args)
    out = []
    for i, a in enumerate(schema.arguments):
        if i < len(node.args) and not a.kwarg_only:
            out.append(node.args[i])
        elif a.name in node.kwargs:
            out.append(node.kwargs[a.name])
        elif a.has_default_value():
            out.append(a.default_value)
        else:
            out.append(None)
    return tuple(out)


@dataclass(frozen=True)
class Lowering:
    """One registry record: the op's kind, its implementation and what it declares."""

    kind: str
    impl: Any                                 # function (pointwise, kernel) or combine spec (reduction)
    supports: Supports | None = None
    epilogue: bool = False

    def lower(self, ctx: KernelContext) -> None:
        """Run a kernel lowering, ``impl(ctx, *bind_args(ctx.node))``, or a group lowering,
        ``impl(ctx)`` (the whole group is ``ctx.group``)."""
        if self.kind == "group":
            self.impl(ctx)
        else:
            self.impl(ctx, *bind_args(ctx.node))


#: every registration made through :func:`register_lowering`
LOWERINGS: dict = {}


def register_lowering(*ops, kind: str = "kernel", supports: Supports | None = None,
                      epilogue: bool = False) -> Callable:
    """Register the decorated lowering (or, for reductions, the combine spec) for ``ops`` (overloads,
    or packets meaning every overload). See the module docstring for what each kind receives."""
    if kind not in KINDS:
        raise ValueError(f"unknown lowering kind {kind!r}; kinds: {KINDS}")
    if epilogue and kind != "kernel":
        raise ValueError("only kernel lowerings take an epilogue")

    def deco(impl):
        rec = Lowering(kind, impl, supports, epilogue)
        for op in ops:
            for o in _overloads(op):
                _TABLES[kind][o] = impl
                LOWERINGS[o] = rec
        return impl
    return deco


def find_lowering(target) -> Lowering | None:
    """The registry record of ``target`` (None: no lowering)."""
    return LOWERINGS.get(target)


def supports(target, *args: Any, **kwargs: Any) -> bool | str:
    """Whether ``target``'s lowering takes these arguments (traced values): ``True``, or ``False`` /
    a reason. An op without a lowering is ``False``; one that declares no ``supports`` is ``True``."""
    rec = find_lowering(target)
    if rec is None:
        return False
    if rec.supports is None:
        return True
    answer = rec.supports(*args, **kwargs)
    return True if answer is None or answer is True else answer


def node_unsupported(n: fx.Node) -> str | None:
    """The reason ``n``'s lowering declares it cannot take ``n`` (None when it can, or declares
    nothing): :func:`supports` on the node's traced argument values."""
    rec = find_lowering(n.target)
    if rec is None or rec.supports is None:
        return None
    args, kwargs = fx.node.map_arg((n.args, n.kwargs), lambda a: a.meta.get("val"))
    answer = supports(n.target, *args, **kwargs)
    if answer is True:
        return None
    return answer or f"{n.target}: the lowering does not take this case"


def takes_epilogue(target) -> bool:
    """Whether ``target`` anchors a group with pointwise consumers fused after it (matmul)."""
    rec = find_lowering(target)
    return bool(rec and rec.epilogue)


def op_kind(target) -> str:
    """'view', 'pointwise', 'reduction', 'kernel' or 'fallback'."""
    if target in VIEWS:
        return "view"
    if target in POINTWISE:
        return "pointwise"
    if target in REDUCTIONS:
        return "reduction"
    if target in KERNELS or lookup(target) is not None or is_nki_hop(target):  # a hand-written kernel
        return "kernel"
    return "fallback"
