"""Side-effect-only ops: ``with_effects`` unwrapped, and kept alive by dead-code elimination.

AOTAutograd threads ops that exist for their effect (``aten._linalg_check_errors``, which raises
on a singular matrix in ``linalg.inv``) through the ``with_effects`` higher-order op and an effect
token: ``with_effects(token, op, *args) -> (new_token, *results)``. The host wrapper calls such an
op as a declared fallback like any other; the token is an empty placeholder tensor, so the new
token is the old one. A call that returns nothing is used by no one and must still run: every
dead-code elimination asks :func:`is_impure`.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from ..config import Config


def is_impure(n: fx.Node) -> bool:
    """fx's own rule, plus ATen calls that return nothing (they exist for an effect)."""
    if n.is_impure():
        return True
    t = n.target
    return n.op == "call_function" and isinstance(t, torch._ops.OpOverload) and not t._schema.returns


def strip_effect_tokens(gm: fx.GraphModule, cfg: Config | None = None) -> None:
    """``with_effects(token, op, *args)`` of an ATen op with at most one result becomes a plain
    call of ``op``; the new token is the input token."""
    hop = getattr(torch.ops.higher_order, "with_effects", None)
    if hop is None:
        return
    g = gm.graph
    for node in list(g.nodes):
        if node.op != "call_function" or node.target is not hop:
            continue
        token, op, args = node.args[0], node.args[1], node.args[2:]
        if not isinstance(op, torch._ops.OpOverload) or len(op._schema.returns) > 1:
            continue
        users = list(node.users)
        if any(u.target is not operator.getitem for u in users):
            continue
        with g.inserting_before(node):
            call = g.call_function(op, tuple(args), dict(node.kwargs))
        val = node.meta.get("val")
        if op._schema.returns and isinstance(val, (tuple, list)) and len(val) > 1:
            call.meta["val"] = val[1]
        for u in users:
            u.replace_all_uses_with(token if u.args[1] == 0 else call)
            g.erase_node(u)
        g.erase_node(node)
