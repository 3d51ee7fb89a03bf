"""Fold ops whose operand has no elements but whose result has some.

Shapes are static, so an operand with zero elements (a slice of length 0, an empty index list, a
zero-width chunk of a hybrid model's state) is known at compile time. A kernel cannot take such an
operand (there is no zero-byte HBM tensor to hand it), so instead of lowering the op we rewrite it
to what torch defines it to be:

- scatter-like ops (``slice_scatter``, ``index_put``, ``scatter``, ``index_add``, ...) with nothing
  to write are their ``self`` input;
- ``cat`` drops its empty pieces;
- ``sum``/``prod``/``mean``/``any``/``all`` over an empty extent and a matmul with an empty
  contraction are constants (0, 1, NaN, False, True, 0);
- ``constant_pad_nd`` of an empty tensor is all padding value.

Ops that produce an empty result need nothing here (the wrapper allocates it without a kernel), and
any other op left with an empty operand is refused by the lowering (a declared fallback), so an empty
tensor never reaches a kernel call.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.fx as fx

from ..config import Config

aten = torch.ops.aten

#: op -> index of the argument that, when empty, makes the op return its ``self`` (argument 0)
_NOTHING_WRITTEN: dict[Any, int] = {
    aten.slice_scatter.default: 1,
    aten.select_scatter.default: 1,
    aten.diagonal_scatter.default: 1,
    aten.as_strided_scatter.default: 1,
    aten.index_put.default: 2,
    aten.scatter.src: 2,
    aten.scatter.value: 2,
    aten.scatter_add.default: 2,
    aten.scatter_reduce.two: 2,
    aten.index_add.default: 2,
    aten.index_copy.default: 2,
    aten.index_fill.int_Scalar: 2,
    aten.index_fill.int_Tensor: 2,
}
#: reductions over an empty extent: the value torch defines
_EMPTY_REDUCTION: dict[Any, Any] = {
    aten.sum.default: 0, aten.sum.dim_IntList: 0, aten.prod.default: 1, aten.prod.dim_int: 1,
    aten.mean.default: math.nan, aten.mean.dim: math.nan,
    aten.any.default: False, aten.any.dim: False, aten.any.dims: False,
    aten.all.default: True, aten.all.dim: True, aten.all.dims: True,
}
_MATMULS = (aten.mm.default, aten.bmm.default)


def _val(a: Any) -> Any:
    return a.meta.get("val") if isinstance(a, fx.Node) else None


def _empty(a: Any) -> bool:
    v = _val(a)
    return isinstance(v, torch.Tensor) and v.numel() == 0


def _is_output_of_graph(n: fx.Node) -> bool:
    return any(u.op == "output" for u in n.users)


def _replace(gm: fx.GraphModule, n: fx.Node, new: fx.Node) -> None:
    new.meta.update(n.meta)
    n.replace_all_uses_with(new)
    gm.graph.erase_node(n)


def _same(gm: fx.GraphModule, n: fx.Node, src: fx.Node) -> None:
    """``n`` computes ``src`` unchanged: use ``src`` itself only when it has exactly ``n``'s layout
    (the views consuming ``n`` address it through ``n``'s strides) and ``n`` is not a graph output
    (an output never aliases an input or another output); otherwise a copy laid out as ``n``."""
    out, v = _val(n), _val(src)
    same_layout = (v.dtype == out.dtype and v.shape == out.shape and v.stride() == out.stride()
                   and v.storage_offset() == out.storage_offset())
    if _is_output_of_graph(n) or not same_layout:
        with gm.graph.inserting_before(n):
            new = gm.graph.call_function(aten._to_copy.default, (src,), {"dtype": out.dtype})
        _replace(gm, n, new)
    else:
        n.replace_all_uses_with(src)
        gm.graph.erase_node(n)


def _full(gm: fx.GraphModule, n: fx.Node, value: Any) -> None:
    out = _val(n)
    if isinstance(value, float) and math.isnan(value) and not out.dtype.is_floating_point:
        return  # no NaN in an integer result: leave it to the lowering's refusal
    with gm.graph.inserting_before(n):
        new = gm.graph.call_function(aten.full.default, (list(out.shape), value),
                                     {"dtype": out.dtype, "layout": torch.strided,
                                      "device": out.device, "pin_memory": False})
    _replace(gm, n, new)


def fold_empty_operands(gm: fx.GraphModule, cfg: Config | None = None) -> None:
    """Rewrite every op with an empty operand and a non-empty result (see the module docstring)."""
    for n in list(gm.graph.nodes):
        if n.op != "call_function":
            continue
        out = _val(n)
        if not isinstance(out, torch.Tensor) or out.numel() == 0:
            continue
        t = n.target
        if t in _NOTHING_WRITTEN:
            i = _NOTHING_WRITTEN[t]
            arg = n.args[i] if i < len(n.args) else None
            if t is aten.index_put.default:  # indices (arg 1) or values (arg 2) empty: nothing written
                idx = [a for a in n.args[1] if a is not None]
                nothing = _empty(arg) or any(_empty(a) for a in idx)
            else:
                nothing = _empty(arg)
            if nothing and isinstance(_val(n.args[0]), torch.Tensor):
                _same(gm, n, n.args[0])
        elif t is aten.cat.default:
            pieces = list(n.args[0])
            keep = [p for p in pieces if not _empty(p)]
            if len(keep) == len(pieces) or not keep:
                continue
            if len(keep) == 1:
                _same(gm, n, keep[0])
            else:
                n.args = (keep,) + tuple(n.args[1:])
        elif t in _EMPTY_REDUCTION and _empty(n.args[0]):
            _full(gm, n, _EMPTY_REDUCTION[t])
        elif t in _MATMULS and (_empty(n.args[0]) or _empty(n.args[1])):
            _full(gm, n, 0)
        elif t is aten.constant_pad_nd.default and _empty(n.args[0]):
            _full(gm, n, n.args[2] if len(n.args) > 2 else 0)
    gm.graph.lint()
