"""Fold constant float64 0-d operands of narrower float ops into Python scalars.

Code such as ``x * np.sqrt(d_model)`` or ``x * torch.tensor(8.0, dtype=torch.float64).sqrt()``
reaches the graph as a chain of 0-d float64 ops on a tensor constant (``get_attr`` ->
``lift_fresh_copy`` -> ``_to_copy`` -> ``sqrt``) that feeds a float32/bf16 ``mul``. The hardware
has no float64, so without this pass the chain *and* the big multiply run on the host.

Torch's own semantics make the fold exact: a 0-d tensor does not take part in type promotion
against a dimensioned tensor of the same category, so ``f32[N] * f64[]`` is float32, and the CPU
kernel reads the 0-d operand as a scalar of the op's compute type -- exactly what it does with a
Python float operand (a wrapped number is the same kind of 0-d CPU scalar). So the chain is
evaluated here, in float64 with torch as eager does, and its value replaces the operand as a
Python float. Only constant chains are folded (every leaf is a ``get_attr`` tensor or a
tensor-free op like ``scalar_tensor``), and only when the consumer keeps the dimensioned operand's
dtype; float64 tensor math and float64 graph inputs stay as they are (a declared fallback).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from ..config import Config

aten = torch.ops.aten

#: binary ops whose ``.Tensor`` form takes a Python scalar in the same argument position
_BINARY = (aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor, aten.div.Tensor)
#: ops allowed inside a folded chain: pure, deterministic, and torch computes them on the host in
#: eager too (0-d CPU tensors), so evaluating them here gives eager's value bit for bit
_FOLDABLE = {
    aten.lift_fresh_copy.default, aten.clone.default, aten._to_copy.default,
    aten.scalar_tensor.default, aten.sqrt.default, aten.rsqrt.default, aten.reciprocal.default,
    aten.neg.default, aten.exp.default, aten.log.default, aten.pow.Tensor_Scalar,
    aten.pow.Tensor_Tensor, aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor, aten.div.Tensor,
    aten.mul.Scalar, aten.add.Scalar, aten.sub.Scalar, aten.div.Scalar,
}
_NARROW_FLOATS = (torch.float32, torch.bfloat16, torch.float16)
#: the deepest chain folded (these chains are a handful of ops; a bound keeps the walk cheap)
_MAX_CHAIN = 32
#: marks an argument whose value is not a compile-time constant
_UNKNOWN = object()


def _val(a: Any) -> Any:
    return a.meta.get("val") if isinstance(a, fx.Node) else None


def _is_wide_scalar(a: Any) -> bool:
    v = _val(a)
    return isinstance(v, torch.Tensor) and v.dim() == 0 and v.dtype == torch.float64


def _evaluate(gm: fx.GraphModule, node: fx.Node, memo: dict[fx.Node, Any],
              depth: int = 0) -> torch.Tensor | None:
    """The value of ``node`` if it is a constant 0-d chain, computed as eager would; else None."""
    if node in memo:
        return memo[node]
    if depth > _MAX_CHAIN:
        return None  # not memoised: a shallower path to this node may still fold it
    result = None
    if node.op == "get_attr":
        t = getattr(gm, str(node.target), None)
        if isinstance(t, torch.Tensor) and t.dim() == 0 and t.device.type == "cpu":
            result = t.detach().clone()
    elif node.op == "call_function" and node.target in _FOLDABLE:
        v = _val(node)
        if isinstance(v, torch.Tensor) and v.dim() == 0:
            args = [_constant_arg(gm, a, memo, depth) for a in node.args]
            kwargs = {k: _constant_arg(gm, a, memo, depth) for k, a in node.kwargs.items()}
            if not any(a is _UNKNOWN for a in (*args, *kwargs.values())):
                kwargs.pop("device", None)
                try:
                    out = node.target(*args, **kwargs)
                except (RuntimeError, TypeError, ValueError):
                    out = None  # not foldable here: the op stays in the graph as it was
                if isinstance(out, torch.Tensor) and out.dtype == v.dtype and out.dim() == 0:
                    result = out
    memo[node] = result
    return result


def _constant_arg(gm: fx.GraphModule, a: Any, memo: dict[fx.Node, Any], depth: int) -> Any:
    if isinstance(a, fx.Node):
        t = _evaluate(gm, a, memo, depth + 1)
        return _UNKNOWN if t is None else t
    if isinstance(a, (list, tuple)):
        return _UNKNOWN if any(isinstance(x, fx.Node) for x in a) else a
    return a


def fold_wide_scalar_operands(gm: fx.GraphModule, cfg: Config | None = None) -> None:
    """Replace a constant float64 0-d operand of a float32/bf16/fp16 binary op by a Python float."""
    g = gm.graph
    memo: dict[fx.Node, Any] = {}
    for node in list(g.nodes):
        if node.op != "call_function" or node.target not in _BINARY or len(node.args) != 2:
            continue
        out = _val(node)
        if not isinstance(out, torch.Tensor) or out.dtype not in _NARROW_FLOATS:
            continue
        a, b = node.args
        if _is_wide_scalar(b) and _keeps_dtype(a, out):
            tensor, scalar = a, b
        elif (_is_wide_scalar(a) and _keeps_dtype(b, out) and (
                node.target is aten.mul.Tensor
                or node.target is aten.add.Tensor and "alpha" not in node.kwargs)):
            tensor, scalar = b, a  # commutative: the scalar moves to argument 1
        else:
            continue
        value = _evaluate(gm, scalar, memo)
        if value is None:
            continue
        node.args = (tensor, float(value.item()))


def _keeps_dtype(a: Any, out: torch.Tensor) -> bool:
    """Whether ``a`` is a dimensioned tensor of the result's dtype (so a scalar other operand cannot
    change the result dtype, as a 0-d float64 one does not either)."""
    v = _val(a)
    return isinstance(v, torch.Tensor) and v.dim() > 0 and v.dtype == out.dtype
