"""Explicit attention, ``softmax(q @ k^T / c, -1) @ v`` written out in a model, becomes one
``neuron_inductor::softmax_attention`` kernel (``lowering/attention/explicit.py``): a pattern rewrite,
as Inductor's ``fx_passes/fuse_attention.py`` turns such graphs into its SDPA op.

Traced, the math form is two ``bmm`` around a decomposed softmax (``amax``, ``sub``, ``exp``, ``sum``,
``div``); lowered as it is, the fp32 score matrix goes to HBM after the first GEMM, through a softmax
kernel, and back for the second (GQA K/V repeated by ``repeat_interleave`` are materialised too). The
kernel keeps the scores on chip and reads grouped K/V heads in place.

The match is structural and exact: one ``bmm`` of Q and K^T, an optional division by (or multiplication
with) a positive constant, a softmax over the last axis spelled exactly as the decomposition spells it,
one ``bmm`` with V, every intermediate used only by the next step (so nothing else needs the scores:
a training graph that saves the probabilities for its backward is left alone), float32 throughout.
Anything else is not rewritten: dropout between the softmax and ``@ v``, a mask, another scale
(a tensor), a softmax over another axis, an intermediate read elsewhere. Where the semantics of the
kernel differ from eager's (non-finite inputs) see ``lowering/attention/explicit.py``.
"""
from __future__ import annotations

import math

import torch
from torch import fx

from ..config import Config
from ..lowering.attention.explicit import SOFTMAX_ATTENTION, unsupported

aten = torch.ops.aten
_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


def _val(n) -> torch.Tensor | None:
    v = n.meta.get("val") if isinstance(n, fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _is(n, *targets) -> bool:
    return isinstance(n, fx.Node) and n.op == "call_function" and n.target in targets


def _same_shape_expand(n) -> bool:
    return _is(n, aten.expand.default) and _val(n) is not None and _val(n.args[0]) is not None and \
        tuple(_val(n).shape) == tuple(_val(n.args[0]).shape)


def _strip(n, chain: list) -> fx.Node:
    """``n`` without the views (and same-shape expands) between it and a computed value; the views
    stripped are appended to ``chain``."""
    while _is(n, *_VIEWS) or _same_shape_expand(n):
        chain.append(n)
        n = n.args[0]
    return n


def _last_dim(n, dims) -> bool:
    v = _val(n)
    return v is not None and isinstance(dims, (list, tuple)) and len(dims) == 1 and \
        int(dims[0]) % v.dim() == v.dim() - 1


def _softmax(p) -> tuple[fx.Node, list] | None:
    """(the scores, the softmax's nodes) of ``p = div(e, sum(e)), e = exp(s - amax(s))`` over the last
    axis."""
    if not _is(p, aten.div.Tensor) or len(p.args) != 2:
        return None
    e, l = p.args
    if not _is(e, aten.exp.default) or not _is(l, aten.sum.dim_IntList) or l.args[0] is not e or \
            not _last_dim(e, l.args[1]) or not (len(l.args) > 2 and l.args[2]) or l.kwargs.get("dtype"):
        return None
    sub = e.args[0]
    if not _is(sub, aten.sub.Tensor) or len(sub.args) != 2 or sub.kwargs.get("alpha", 1) != 1:
        return None
    s, m = sub.args
    if not _is(m, aten.amax.default) or m.args[0] is not s or not _last_dim(s, m.args[1]) or \
            not (len(m.args) > 2 and m.args[2]):
        return None
    return s, [p, e, l, sub, m]


def _scale(s) -> tuple[fx.Node, float, list] | None:
    """(the unscaled scores, the scale, the scaling nodes) of ``s``: a division by, or a product
    with, a positive finite constant, or nothing (scale 1)."""
    if _is(s, aten.div.Tensor, aten.mul.Tensor) and len(s.args) == 2 and isinstance(s.args[0], fx.Node) \
            and isinstance(s.args[1], (int, float)) and not isinstance(s.args[1], bool):
        c = float(s.args[1])
        if not (math.isfinite(c) and c > 0):
            return None
        return s.args[0], (1.0 / c if s.target is aten.div.Tensor else c), [s]
    return s, 1.0, []


def _heads(b3) -> fx.Node | None:
    """The 4-D [B, H, S, X] value a 3-D bmm operand ``b3`` ([B * H, S, X]) is a view of."""
    x = b3
    if _is(x, *_VIEWS):
        x = x.args[0]
        if _same_shape_expand(x):
            x = x.args[0]
    v, v3 = _val(x), _val(b3)
    if x is b3 or v is None or v.dim() != 4 or tuple(v.shape[2:]) != tuple(v3.shape[1:]) or \
            v.shape[0] * v.shape[1] != v3.shape[0]:
        return None
    return x


def _repeated(x) -> tuple[fx.Node, int, int] | None:
    """(source, axis, repeats) when ``x`` is ``repeat_interleave(source, repeats, axis)`` as traced:
    ``view(clone(expand(unsqueeze(source, axis + 1))))`` merging the new axis into ``axis``."""
    if not _is(x, *_VIEWS) or len(x.users) < 1:
        return None
    c = x.args[0]
    if not _is(c, aten.clone.default) or not _is(c.args[0], aten.expand.default):
        return None
    ex = c.args[0]
    un = ex.args[0]
    if not _is(un, aten.unsqueeze.default):
        return None
    src, sv, xv = un.args[0], _val(un.args[0]), _val(x)
    if sv is None or xv is None or sv.dim() != xv.dim() or not _val(c).is_contiguous():
        return None
    u = un.args[1] % (sv.dim() + 1)
    if u == 0:
        return None
    rep = int(_val(ex).shape[u])
    want5 = list(sv.shape[:u]) + [rep] + list(sv.shape[u:])
    want = list(sv.shape)
    want[u - 1] *= rep
    if list(_val(ex).shape) != want5 or list(xv.shape) != want or rep < 1:
        return None
    return src, u - 1, rep


def _unrepeat(x4, post: list[int]) -> tuple[fx.Node, list[int], int] | None:
    """(source, permutation, repeats) when ``permute(x4, post)`` is the permutation of a
    ``repeat_interleave`` of ``source`` along the axis that lands on the heads axis (1)."""
    perm = list(post)
    while _is(x4, aten.permute.default):
        p = [int(d) % 4 for d in x4.args[1]]
        perm = [p[i] for i in perm]
        x4 = x4.args[0]
    r = _repeated(x4)
    if r is None:
        return None
    src, axis, rep = r
    if perm.index(axis) != 1:
        return None
    return src, perm, rep


def _operands(g: fx.Graph, qb, ktb, vb) -> tuple[list, int] | None:
    """The kernel's [B, H, S, D] operands (new view nodes inserted where needed) and K/V's repeats."""
    q4, kt4, v4 = _heads(qb), _heads(ktb), _heads(vb)
    if q4 is not None and kt4 is not None and v4 is not None and \
            len({tuple(_val(x).shape[:2]) for x in (q4, kt4, v4)}) == 1:
        ku, vu = _unrepeat(kt4, [0, 1, 3, 2]), _unrepeat(v4, [0, 1, 2, 3])
        if ku is not None and vu is not None and ku[2] == vu[2]:
            ops = [q4]
            for src, perm, _ in (ku, vu):
                ops.append(_node(g, aten.permute.default, (src, perm), _val(src).permute(perm)))
            return ops, ku[2]
        k4 = _node(g, aten.permute.default, (kt4, [0, 1, 3, 2]), _val(kt4).permute(0, 1, 3, 2))
        return [q4, k4, v4], 1
    kb = _node(g, aten.permute.default, (ktb, [0, 2, 1]), _val(ktb).permute(0, 2, 1))
    return [_node(g, aten.unsqueeze.default, (x, 0), _val(x).unsqueeze(0)) for x in (qb, kb, vb)], 1


def _node(g: fx.Graph, target, args, val) -> fx.Node:
    n = g.call_function(target, args)
    n.meta["val"] = val
    return n


def _match(pv) -> tuple | None:
    """(q, k^T, v operands of the bmms, the scale, the pattern's nodes) of ``bmm(softmax(bmm(q, k^T)
    * scale), v)``, or None."""
    if not _is(pv, aten.bmm.default):
        return None
    a, vb = pv.args
    nodes: list = [pv]
    p = _strip(a, nodes)
    sm = _softmax(p)
    if sm is None:
        return None
    s, snodes = sm
    nodes += snodes
    sc = _scale(s)
    if sc is None:
        return None
    s0, scale, scn = sc
    nodes += scn
    qk = _strip(s0, nodes)
    if not _is(qk, aten.bmm.default):
        return None
    nodes.append(qk)
    qb, ktb = qk.args
    vals = [_val(x) for x in (qb, ktb, vb, qk, pv, p)]
    if any(v is None for v in vals) or any(v.dtype != torch.float32 for v in vals):
        return None
    members = set(nodes)
    for n in nodes:
        if n is not pv and any(u not in members for u in n.users):
            return None
    return qb, ktb, vb, scale, nodes


def explicit_attention_to_kernel(gm: fx.GraphModule, cfg: Config | None = None) -> None:
    """Replace every matched explicit attention (``_match``) whose operands the kernel takes with a
    ``neuron_inductor::softmax_attention`` call; dead-code elimination drops what it replaces."""
    if cfg is not None and not cfg.fusion:  # the unfused baseline keeps one kernel per op
        return
    g = gm.graph
    for pv in list(g.nodes):
        m = _match(pv)
        if m is None:
            continue
        qb, ktb, vb, scale, _ = m
        with g.inserting_before(pv):
            ops = _operands(g, qb, ktb, vb)
        if ops is None:
            continue
        (q4, k4, v4), _rep = ops
        if unsupported(_val(q4), _val(k4), _val(v4)) is not None:
            continue   # the inserted views are dead: dead-code elimination drops them
        qv, vv = _val(q4), _val(v4)
        with g.inserting_before(pv):
            call = _node(g, SOFTMAX_ATTENTION, (q4, k4, v4, scale),
                         qv.new_empty(tuple(qv.shape[:-1]) + (vv.shape[-1],)))
            out = _node(g, aten.view.default, (call, list(_val(pv).shape)), _val(pv))
        pv.replace_all_uses_with(out)
        g.erase_node(pv)
