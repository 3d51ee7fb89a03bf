"""A last-axis ``cat`` of equal pieces read only by elementwise ops becomes an elementwise select.

``cat`` is a kernel of its own (a DMA copy per piece), so every value that passes through one makes
an extra HBM round trip and splits the elementwise chain around it in two or three kernels. Rotary
embeddings are the common case: ``rotate_half(x) = cat(-x2, x1)`` cost a ``neg`` kernel per half, a
``cat`` kernel and the multiply-add that reads it, forward and backward (128-byte rows each).

Viewing the result's last axis ``2 * n`` as ``[2, n]``, element ``[..., h, j]`` is ``x_h[..., j]``:

    cat([x_0, x_1], -1) == where((iota & n) == 0, x_0', x_1').view(..., 2 * n)

with ``x_h'`` the piece broadcast along the new axis and ``iota`` numbering the elements of the
``[..., 2, n]`` space (bit ``n`` of an element's index is ``h`` when ``n`` is a power of two). Every
node is then elementwise over that one space, so fusion folds the pieces' single-use elementwise
producers (re-evaluated on the broadcast pieces) and the consumers into one kernel. It is exact:
``where`` copies values, and the producers compute the same values twice. Only cats whose every
user is elementwise are rewritten; a cat feeding a matmul or a graph output stays a copy kernel.
"""
from __future__ import annotations

import torch
from torch import fx

from ..config import Config
from ..lowering.registry import op_kind

aten = torch.ops.aten

#: pieces longer than this along the axis are already long DMA rows; the copy kernel is cheap
MAX_PIECE = 512


def _val(n) -> torch.Tensor | None:
    v = n.meta.get("val") if isinstance(n, fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _fake(fn, vals: list[torch.Tensor]) -> torch.Tensor:
    """``fn()`` evaluated in the fake mode of ``vals`` (the value metadata the graph carries)."""
    mode = next((getattr(v, "fake_mode", None) for v in vals if getattr(v, "fake_mode", None)), None)
    if mode is None:
        return fn()
    with mode:
        return fn()


def _eligible(node: fx.Node) -> tuple[list[fx.Node], torch.Tensor] | None:
    if node.op != "call_function" or node.target is not aten.cat.default or not node.users:
        return None
    xs = node.args[0]
    d = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    v = _val(node)
    if v is None or v.dim() == 0 or not isinstance(d, int) or d % v.dim() != v.dim() - 1:
        return None
    if not isinstance(xs, (list, tuple)) or len(xs) < 2 or not all(isinstance(x, fx.Node) for x in xs):
        return None
    vals = [_val(x) for x in xs]
    if len(xs) != 2 or any(u is None or tuple(u.shape) != tuple(vals[0].shape) or u.dtype != v.dtype
                           for u in vals):
        return None
    n = vals[0].shape[-1]
    if not v.dtype.is_floating_point or not 0 < n <= MAX_PIECE or n & (n - 1) or \
            not 0 < v.numel() < 2 ** 31:
        return None
    if any(u.op != "call_function" or op_kind(u.target) != "pointwise" for u in node.users):
        return None
    return list(xs), v


def cat_to_select(gm: fx.GraphModule, cfg: Config | None = None) -> None:
    """Rewrite every eligible last-axis ``cat`` (see the module docstring) in place. Without
    fusion (``cfg.fusion`` false) the select would only add kernels: nothing changes."""
    if cfg is not None and not cfg.fusion:
        return
    g = gm.graph
    for node in list(g.nodes):
        found = _eligible(node)
        if found is None:
            continue
        xs, v = found
        vals = [_val(x) for x in xs]
        n = vals[0].shape[-1]
        space = list(v.shape[:-1]) + [2, n]

        def call(op, args, kwargs=None, _vals=vals):
            out = g.call_function(op, args, kwargs or {})
            meta_args = [[x.meta["val"] for x in a] if isinstance(a, (list, tuple)) and a and
                         isinstance(a[0], fx.Node) else (a.meta["val"] if isinstance(a, fx.Node) else a)
                         for a in args]
            out.meta["val"] = _fake(lambda: op(*meta_args, **(kwargs or {})), _vals)
            return out

        def spread(x: fx.Node, depth: int = 2) -> fx.Node:
            """``x`` broadcast over the [..., 2, n] space; a single-use elementwise producer is
            re-evaluated on its broadcast inputs so it fuses with the select."""
            if depth and x.op == "call_function" and op_kind(x.target) == "pointwise" and \
                    len(x.users) == 1 and x.all_input_nodes and not x.kwargs and \
                    all(_val(a) is not None and tuple(_val(a).shape) == tuple(_val(x).shape)
                        for a in x.all_input_nodes):
                args = tuple(spread(a, depth - 1) if isinstance(a, fx.Node) else a for a in x.args)
                return call(x.target, args)
            return call(aten.expand.default, (call(aten.unsqueeze.default, (x, -2)), space))

        with g.inserting_before(node):
            iota = call(aten.arange.start_step, (0, v.numel(), 1),
                        {"dtype": torch.int32, "device": v.device})
            iota = call(aten.view.default, (iota, space))
            first = call(aten.eq.Scalar, (call(aten.bitwise_and.Scalar, (iota, n)), 0))
            out = call(aten.where.self, (first, spread(xs[0]), spread(xs[1])))
            out = call(aten.view.default, (out, list(v.shape)))
        node.replace_all_uses_with(out)
        g.erase_node(node)
