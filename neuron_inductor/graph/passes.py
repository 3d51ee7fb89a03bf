"""FX graph passes run after AOTAutograd and before fusion: the ordered list lives in ``PASSES``."""
from __future__ import annotations

import operator
from typing import Callable

import torch
import torch.fx as fx

aten = torch.ops.aten


def dead_code_elimination(gm: fx.GraphModule) -> None:
    """Drop nodes nobody uses (mutating ops are kept)."""
    gm.graph.eliminate_dead_code()


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


def common_subexpression_elimination(gm: fx.GraphModule) -> None:
    """Merge nodes computing the same op on the same inputs (AOT graphs repeat views and casts)."""
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


PASSES: list[Callable[[fx.GraphModule], None]] = [
    common_subexpression_elimination,
    dead_code_elimination,
]


def run_passes(gm: fx.GraphModule) -> fx.GraphModule:
    for p in PASSES:
        p(gm)
    gm.graph.lint()
    gm.recompile()
    return gm
