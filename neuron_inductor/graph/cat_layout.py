"""A ``cat`` copied once more into a permuted layout is one ``cat`` written in that layout.

A fused-qkv projection's backward stacks dQ, dK and dV (``cat`` along a new leading axis) and then
makes the stack contiguous in the projection's layout (``clone(permute(...))``) for the weight and
input gradient GEMMs: two copy kernels, each reading and writing the whole gradient. Permuting each
piece instead and concatenating along the permuted axis gives the same values, already contiguous:

    clone(permute(cat(xs, d), perm)) == cat([permute(x, perm) for x in xs], perm.index(d))

Exact (copies only); the pieces are read through strided access patterns, as the clone read the stack.
"""
from __future__ import annotations

import torch
from torch import fx

from ..config import Config

aten = torch.ops.aten


def _val(n) -> torch.Tensor | None:
    v = n.meta.get("val") if isinstance(n, fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def cat_into_permuted_layout(gm: fx.GraphModule, cfg: Config | None = None) -> None:
    """Rewrite ``clone(permute(cat(xs, d), perm))`` (cat and permute used once) in place."""
    g = gm.graph
    for clone in list(g.nodes):
        if clone.op != "call_function" or clone.target is not aten.clone.default or \
                clone.kwargs.get("memory_format", torch.contiguous_format) is not torch.contiguous_format:
            continue
        perm_node = clone.args[0]
        if not isinstance(perm_node, fx.Node) or perm_node.target is not aten.permute.default or \
                len(perm_node.users) != 1:
            continue
        cat = perm_node.args[0]
        if not isinstance(cat, fx.Node) or cat.target is not aten.cat.default or len(cat.users) != 1:
            continue
        xs = cat.args[0]
        v = _val(cat)
        out = _val(clone)
        if v is None or out is None or not out.is_contiguous() or \
                not all(isinstance(x, fx.Node) and _val(x) is not None and _val(x).dim() == v.dim()
                        for x in xs):
            continue
        d = (cat.args[1] if len(cat.args) > 1 else cat.kwargs.get("dim", 0)) % v.dim()
        perm = [p % v.dim() for p in perm_node.args[1]]
        with g.inserting_before(clone):
            pieces = []
            for x in xs:
                p = g.call_function(aten.permute.default, (x, perm))
                p.meta["val"] = _val(x).permute(perm)
                pieces.append(p)
            new = g.call_function(aten.cat.default, (pieces, perm.index(d)))
            new.meta["val"] = out
        clone.replace_all_uses_with(new)
        g.erase_node(clone)
        g.erase_node(perm_node)
        g.erase_node(cat)
