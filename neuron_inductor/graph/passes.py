"""FX graph passes run after AOTAutograd and before fusion: the ordered list lives in ``PASSES``."""
from __future__ import annotations

import operator
from typing import Callable

import torch
import torch.fx as fx

from ..config import Config
from .cat_layout import cat_into_permuted_layout
from .cat_select import cat_to_select
from .effects import is_impure, strip_effect_tokens
from .attention_pattern import explicit_attention_to_kernel
from .rotary_pattern import rotary_into_cat, rotary_to_kernel
from .empty import fold_empty_operands
from .stack_pass import masked_sum_to_cat
from .wide_scalars import fold_wide_scalar_operands

aten = torch.ops.aten


def dead_code_elimination(gm: fx.GraphModule, cfg: Config | None = None) -> None:
    """Drop nodes nobody uses (mutating ops and effect-only calls are kept)."""
    gm.graph.eliminate_dead_code(is_impure)


def _key(node: fx.Node):
    def norm(a):
        if isinstance(a, fx.Node):
            return ("node", id(a))
        if isinstance(a, (list, tuple)):
            return tuple(norm(x) for x in a)
        if isinstance(a, float) and a != a:
            return ("nan",)
        return (type(a).__name__, a)
    return (node.target, norm(node.args), tuple(sorted((k, norm(v)) for k, v in node.kwargs.items())))


_IMPURE = {aten.copy_.default, aten.native_dropout.default, aten.rand.default, aten.randn.default,
           aten.bernoulli.default, aten.rand_like.default, aten.randn_like.default}


def _output_nodes(gm: fx.GraphModule) -> list:
    out = next((n for n in gm.graph.nodes if n.op == "output"), None)
    if out is None:
        return []
    args = out.args[0]
    return list(args) if isinstance(args, (list, tuple)) else [args]


def _keep_outputs_distinct(gm: fx.GraphModule, before: list) -> None:
    """Give back each output its own tensor where merging made two of them one node.

    Two equal fresh allocations (say two layers' ``torch.zeros(())`` step counters, each bumped by
    one) are two tensors in eager; returned as one object, an in-place update through one later
    shows in the other. So a merged duplicate output becomes a ``clone`` of the kept node."""
    out = next((n for n in gm.graph.nodes if n.op == "output"), None)
    args = out.args[0] if out is not None else None
    if not isinstance(args, (list, tuple)) or len(args) != len(before):
        return
    new, owner = list(args), {}
    for i, (a, orig) in enumerate(zip(args, before)):
        if not isinstance(a, fx.Node) or getattr(a.target, "is_view", False):
            continue  # a view output aliases its base on purpose; AOTAutograd replays it
        first = owner.setdefault(a, orig)
        if first is orig:
            continue  # the same node as the first output using it, before merging too
        with gm.graph.inserting_before(out):
            c = gm.graph.call_function(aten.clone.default, (a,))
        c.meta.update(a.meta)
        new[i] = c
    out.args = (type(args)(new),)


def common_subexpression_elimination(gm: fx.GraphModule, cfg: Config | None = None) -> None:
    """Merge nodes computing the same op on the same inputs (AOT graphs repeat views and casts).
    Outputs that were distinct nodes stay distinct tensors (:func:`_keep_outputs_distinct`)."""
    before = _output_nodes(gm)
    seen: dict = {}
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target in _IMPURE or node.target is operator.getitem:
            continue
        if isinstance(node.target, torch._ops.OpOverload) and (
                node.target._schema.is_mutable or "rand" in node.target.__name__ or
                "dropout" in node.target.__name__):
            continue
        try:
            k = _key(node)
            hash(k)
        except TypeError:
            continue
        if k in seen:
            node.replace_all_uses_with(seen[k])
            gm.graph.erase_node(node)
        else:
            seen[k] = node
    _keep_outputs_distinct(gm, before)


def _draws_random(op, args, kwargs) -> bool:
    """Whether this call consumes random numbers (a seeded op with a non-zero dropout probability)."""
    if not isinstance(op, torch._ops.OpOverload):
        return True
    if torch.Tag.nondeterministic_seeded not in op.tags:
        return False
    for i, arg in enumerate(op._schema.arguments):
        if arg.name in ("dropout_p", "p"):
            value = kwargs.get(arg.name, args[i] if i < len(args) else arg.default_value)
            return value != 0
    return True


def _tuple_val(node: fx.Node, n: int | None = None) -> tuple:
    """A tuple-valued node's fake value, from its own meta or else from its getitem users'."""
    if "val" in node.meta:
        return tuple(node.meta["val"])
    items = {u.args[1]: u.meta.get("val") for u in node.users if u.target is operator.getitem}
    return tuple(items.get(i) for i in range(n if n is not None else max(items, default=-1) + 1))


def strip_rng_wrappers(gm: fx.GraphModule, cfg: Config | None = None) -> None:
    """Unwrap activation checkpointing's RNG bookkeeping around ops that draw no random numbers.

    ``run_and_save_rng_state(op, ...)`` saves the generator state so the backward can replay a random
    op with ``run_with_rng_state(state, op, ...)``. For a deterministic op (attention without
    dropout, the common case) replaying is just calling it again, so both become plain calls; the
    saved state, which only the replay reads, becomes a placeholder tensor of the same shape.
    """
    hops = torch.ops.higher_order
    g = gm.graph
    for node in list(g.nodes):
        if node.op != "call_function":
            continue
        if node.target is getattr(hops, "run_and_save_rng_state", None):
            op, args = node.args[0], node.args[1:]
            if _draws_random(op, args, node.kwargs):
                continue
            state_val, result_val = _tuple_val(node, 2)
            with g.inserting_before(node):
                call = g.call_function(op, tuple(args), dict(node.kwargs))
                call.meta["val"] = result_val
                state = g.call_function(aten.full.default, ([1], 0),
                                        {"dtype": state_val.dtype, "device": state_val.device})
                state.meta["val"] = torch.empty(1, dtype=state_val.dtype, device="meta")
            for user in list(node.users):
                if user.target is operator.getitem:
                    user.replace_all_uses_with(state if user.args[1] == 0 else call)
                    g.erase_node(user)
            g.erase_node(node)
        elif node.target is getattr(hops, "run_with_rng_state", None):
            op, args = node.args[1], node.args[2:]
            if _draws_random(op, args, node.kwargs):
                continue
            with g.inserting_before(node):
                call = g.call_function(op, tuple(args), dict(node.kwargs))
                call.meta["val"] = node.meta.get("val") or _tuple_val(node)
            node.replace_all_uses_with(call)
            g.erase_node(node)


def full_like_to_full(gm: fx.GraphModule, cfg: Config | None = None) -> None:
    """``full_like(x, v)`` with a contiguous result is ``full(shape, v)``: it reads only x's shape,
    and x is often an ``empty_permuted``/``empty`` (torch's refs build constants that way) that has
    no lowering and would otherwise run on the host before dead-code elimination drops it."""
    g = gm.graph
    for node in list(g.nodes):
        if node.op != "call_function" or node.target is not aten.full_like.default:
            continue
        v = node.meta.get("val")
        if not isinstance(v, torch.Tensor) or not v.is_contiguous():
            continue
        with g.inserting_before(node):
            full = g.call_function(aten.full.default, (list(v.shape), node.args[1]),
                                   {"dtype": v.dtype, "device": v.device})
            full.meta["val"] = v
        node.replace_all_uses_with(full)
        g.erase_node(node)


#: every pass is ``fn(gm, cfg)``: it rewrites ``gm`` in place and reads options from ``cfg`` (None: the
#: defaults, fusion on), never from the graph module
PASSES: list[Callable[[fx.GraphModule, Config | None], None]] = [
    strip_rng_wrappers,
    strip_effect_tokens,
    fold_empty_operands,
    full_like_to_full,
    fold_wide_scalar_operands,
    common_subexpression_elimination,
    explicit_attention_to_kernel,
    masked_sum_to_cat,
    rotary_to_kernel,
    cat_to_select,
    cat_into_permuted_layout,
    rotary_into_cat,
    dead_code_elimination,
]


def working_copy(gm: fx.GraphModule) -> fx.GraphModule:
    """A graph module with its own copy of ``gm``'s graph (node metadata copied shallowly, attributes
    and submodules shared). Some passes leave a graph that only our lowering can run (e.g.
    ``cat_into_permuted_layout`` changes which layout an op produces); ``gm`` itself must stay the
    graph AOTAutograd traced, because a graph that fails to compile runs eagerly from it."""
    g = fx.Graph(tracer_cls=gm.graph._tracer_cls)
    g._codegen = gm.graph._codegen
    out, old_out = g.graph_copy(gm.graph, {}, return_output_node=True)
    g.output(out, type_expr=getattr(old_out, "type", None)).meta = dict(old_out.meta)
    copy = fx.GraphModule(gm, g, gm.__class__.__name__)
    copy.meta = dict(gm.meta)
    return copy


def run_passes(gm: fx.GraphModule, cfg: Config | None = None) -> fx.GraphModule:
    """Run :data:`PASSES` on ``gm`` in place (see :func:`working_copy` for a copy to rewrite)."""
    for p in PASSES:
        p(gm, cfg)
    gm.graph.lint()
    gm.recompile()
    return gm
