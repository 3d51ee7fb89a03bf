"""Complex intermediates as pairs of real tensors, in the Dynamo graph, before AOTAutograd.

Trainium has no complex type, and a complex tensor in an ATen graph is a declared fallback. Models use
complex numbers only as a notation inside one computation, the rotary embedding (Llama 4:
``view_as_real(view_as_complex(x.reshape(..., -1, 2)) * polar(1, angle))``), whose inputs and outputs
are real. When every complex value of a graph is made and used by the ops below, each becomes two real
tensors of the same shape (its real and imaginary parts) and the graph has no complex value left; the
backward AOTAutograd derives from it has none either. A complex graph input or output, or any other
op touching a complex value, leaves the graph unchanged (and the ops keep their declared fallbacks).
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import torch
from torch import fx

#: methods that act on a complex tensor's shape only: applied to both parts alike
_SHAPE_METHODS = frozenset({"view", "reshape", "unsqueeze", "squeeze", "expand", "contiguous", "clone",
                            "flatten", "permute", "transpose", "repeat", "expand_as"})
_SHAPE_FUNCTIONS = frozenset({torch.unsqueeze, torch.squeeze, torch.reshape, torch.flatten, torch.permute,
                              torch.transpose, torch.clone})
_MUL = frozenset({operator.mul, torch.mul, "mul", "__mul__", "__rmul__"})
_ADD = frozenset({operator.add, torch.add, "add", "__add__", "__radd__"})
_SUB = frozenset({operator.sub, torch.sub, "sub", "__sub__"})


def _is_complex(n: Any) -> bool:
    v = n.meta.get("example_value") if isinstance(n, fx.Node) else None
    return isinstance(v, torch.Tensor) and v.is_complex()


def _key(n: fx.Node):
    return n.target if n.op == "call_function" else n.target if n.op == "call_method" else None


def _handled(n: fx.Node) -> bool:
    """Whether ``n`` (a node with a complex input or output) is an op this pass rewrites."""
    if n.op not in ("call_function", "call_method"):
        return False
    k = _key(n)
    cx_args = [a for a in n.args if _is_complex(a)]
    if k in (torch.polar, torch.view_as_complex):
        return not any(_is_complex(a) for a in n.args)
    if k is torch.view_as_real:
        return len(n.args) == 1 and _is_complex(n.args[0])
    if k in _MUL | _ADD | _SUB:
        return len(n.args) == 2 and not n.kwargs and bool(cx_args) and \
            not any(isinstance(a, complex) for a in n.args)
    if k is operator.getitem or k in _SHAPE_METHODS or k in _SHAPE_FUNCTIONS:
        return len(cx_args) == 1 and _is_complex(n.args[0]) and not any(_is_complex(v) for v in n.kwargs.values())
    if k in ("conj", torch.conj, "resolve_conj", torch.resolve_conj):
        return len(n.args) == 1
    if k == "to":  # a device move, or a cast to the complex dtype it already has
        dt = n.kwargs.get("dtype", next((a for a in n.args[1:] if isinstance(a, torch.dtype)), None))
        return dt is None or dt == n.args[0].meta["example_value"].dtype
    return False


def rewrite_complex(gm: fx.GraphModule) -> bool:
    """Replace every complex value by a (real, imag) pair when the whole graph allows; True if changed."""
    g = gm.graph
    cx = [n for n in g.nodes if _is_complex(n)]
    if not cx:
        return False
    touching = {u for n in cx for u in n.users} | set(cx)
    if any(n.op in ("placeholder", "get_attr", "output") or not _handled(n) for n in touching):
        return False
    pairs: dict[fx.Node, tuple[fx.Node, fx.Node]] = {}
    for n in list(g.nodes):
        if n not in touching:
            continue
        with g.inserting_before(n):
            out = _rewrite(g, n, pairs)
        if isinstance(out, tuple):
            pairs[n] = out
        else:
            n.replace_all_uses_with(out)
    for n in reversed(list(g.nodes)):
        if n in touching and not n.users:
            g.erase_node(n)
    g.lint()
    gm.recompile()
    return True


def _call(g: fx.Graph, target: Callable, *args: Any, **kwargs: Any) -> fx.Node:
    return g.call_function(target, tuple(args), kwargs)


def _rewrite(g: fx.Graph, n: fx.Node, pairs: dict) -> tuple[fx.Node, fx.Node] | fx.Node:
    k = _key(n)
    if k is torch.polar:
        r, theta = n.args[0], n.args[1]
        return _call(g, operator.mul, r, _call(g, torch.cos, theta)), _call(g, operator.mul, r, _call(g, torch.sin, theta))
    if k is torch.view_as_complex:
        x = n.args[0]
        return _call(g, operator.getitem, x, (Ellipsis, 0)), _call(g, operator.getitem, x, (Ellipsis, 1))
    if k is torch.view_as_real:
        re, im = pairs[n.args[0]]
        return _call(g, torch.stack, [re, im], -1)
    if k in ("conj", torch.conj, "resolve_conj", torch.resolve_conj):
        re, im = pairs[n.args[0]]
        return (re, _call(g, operator.neg, im)) if k in ("conj", torch.conj) else (re, im)
    if k == "to":
        return pairs[n.args[0]]
    if k in _MUL | _ADD | _SUB:
        a, b = n.args
        if k in _MUL:
            return _mul(g, pairs.get(a, a), pairs.get(b, b))
        op = operator.add if k in _ADD else operator.sub
        pa, pb = pairs.get(a, (a, 0.0)), pairs.get(b, (b, 0.0))
        return _call(g, op, pa[0], pb[0]), _call(g, op, pa[1], pb[1])
    # shape ops and indexing: the same call on both parts
    src = n.args[0]
    re, im = pairs[src]
    rest = n.args[1:]
    if n.op == "call_method":
        return (g.call_method(k, (re, *rest), dict(n.kwargs)), g.call_method(k, (im, *rest), dict(n.kwargs)))
    return _call(g, k, re, *rest, **n.kwargs), _call(g, k, im, *rest, **n.kwargs)


def _mul(g: fx.Graph, a, b):
    if isinstance(a, tuple) and isinstance(b, tuple):
        (ar, ai), (br, bi) = a, b
        re = _call(g, operator.sub, _call(g, operator.mul, ar, br), _call(g, operator.mul, ai, bi))
        im = _call(g, operator.add, _call(g, operator.mul, ar, bi), _call(g, operator.mul, ai, br))
        return re, im
    c, s = (a, b) if isinstance(a, tuple) else (b, a)  # complex times a real tensor or number
    return _call(g, operator.mul, c[0], s), _call(g, operator.mul, c[1], s)
