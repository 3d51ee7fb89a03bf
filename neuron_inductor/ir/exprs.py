"""Sympy index expressions -> plain Python integer arithmetic, plus interval bounds.

Generated kernels may only contain int arithmetic (``+ - * // %``, ``min``/``max``), so every index
expression the IR carries is printed here. Bounds over loop ranges let us drop ``min``/``max`` terms
that can never be selected (the last-tile ``min(128, 300 - 128 * i0)`` stays; a ``min(512, 700)``
inside a one-trip loop becomes ``512``) and let the verifier check tile regions statically.
"""
from __future__ import annotations

import math
from typing import Mapping, Union

import sympy

Ranges = Mapping[sympy.Symbol, tuple[int, int]]
Bound = Union[tuple[int, int], None]

# precedence levels of the Python text we produce
_CMP, _ADD, _MUL, _UNARY, _ATOM = 0, 1, 2, 3, 4
_REL_OPS = {"StrictGreaterThan": ">", "GreaterThan": ">=", "StrictLessThan": "<", "LessThan": "<=",
            "Equality": "==", "Unequality": "!="}


class ExprError(ValueError):
    """An index expression that has no exact integer Python form (e.g. a fractional coefficient)."""


def _fname(e: sympy.Basic) -> str:
    return type(e).__name__


# --------------------------------------------------------------------------------------------- bounds

def bounds(e: Union[sympy.Basic, int], ranges: Ranges) -> Bound:
    """Inclusive integer interval of ``e`` when every symbol ranges over ``ranges``; None if unknown.

    Interval arithmetic: sound but not tight for correlated terms (sympy cancels ``i - i`` first).
    """
    e = sympy.sympify(e)
    if e.is_Integer:
        return (int(e), int(e))
    if e.is_Symbol:
        return ranges.get(e)
    if e.is_Add:
        lo = hi = 0
        for a in e.args:
            b = bounds(a, ranges)
            if b is None:
                return None
            lo, hi = lo + b[0], hi + b[1]
        return (lo, hi)
    if e.is_Mul:
        lo = hi = 1
        for a in e.args:
            b = bounds(a, ranges)
            if b is None or (a.is_Rational and not a.is_Integer):
                return None
            corners = (lo * b[0], lo * b[1], hi * b[0], hi * b[1])
            lo, hi = min(corners), max(corners)
        return (lo, hi)
    name = _fname(e)
    if name in ("Min", "Max"):
        bs = [bounds(a, ranges) for a in e.args]
        if any(b is None for b in bs):
            return None
        f = min if name == "Min" else max
        return (f(b[0] for b in bs), f(b[1] for b in bs))
    if name in ("floor", "FloorDiv", "CleanDiv"):
        num, den = _div_parts(e)
        bn = bounds(num, ranges)
        if bn is None or not (den.is_Integer and int(den) > 0):
            return None
        d = int(den)
        return (bn[0] // d, bn[1] // d)
    if name in ("Mod", "PythonMod"):
        a, m = e.args
        if not (m.is_Integer and int(m) > 0):
            return None
        ba = bounds(a, ranges)
        if ba is not None and 0 <= ba[0] and ba[1] < int(m):
            return ba
        return (0, int(m) - 1)
    return None


def _div_parts(e: sympy.Basic) -> tuple[sympy.Expr, sympy.Expr]:
    """``(numerator, denominator)`` of a floor division in any of its sympy spellings."""
    name = _fname(e)
    if name in ("FloorDiv", "CleanDiv"):
        return e.args[0], e.args[1]
    num, den = sympy.fraction(sympy.together(e.args[0]))
    return sympy.expand(num), den


# ----------------------------------------------------------------------------------------- simplify

def simplify(e: Union[sympy.Basic, int], ranges: Ranges | None = None) -> sympy.Expr:
    """Drop ``Min``/``Max`` arguments, ``Mod`` and floor divisions that the ranges decide."""
    e = sympy.sympify(e)
    ranges = ranges or {}
    if e is sympy.true or e is sympy.false:
        return e
    if _fname(e) in _REL_OPS:
        lhs, rhs = (simplify(a, ranges) for a in e.args)
        d = bounds(sympy.expand(lhs - rhs), ranges)
        if d is not None:  # decided over the whole range: print True / False
            decided = {">": (d[0] > 0, d[1] <= 0), ">=": (d[0] >= 0, d[1] < 0), "<": (d[1] < 0, d[0] >= 0),
                       "<=": (d[1] <= 0, d[0] > 0), "==": (d == (0, 0), d[0] > 0 or d[1] < 0),
                       "!=": (d[0] > 0 or d[1] < 0, d == (0, 0))}[_REL_OPS[_fname(e)]]
            if decided[0]:
                return sympy.true
            if decided[1]:
                return sympy.false
        return e.func(lhs, rhs, evaluate=False)
    if not e.free_symbols:
        if not e.is_Integer:
            e = sympy.Integer(_const_int(e))
        return e
    e = _simp(e, ranges)
    b = bounds(e, ranges)
    if b is not None and b[0] == b[1]:
        return sympy.Integer(b[0])
    return e


def _const_int(e: sympy.Basic) -> int:
    v = sympy.nsimplify(e)
    if not v.is_Integer:
        raise ExprError(f"index expression {e} is not an integer")
    return int(v)


def _simp(e: sympy.Basic, ranges: Ranges) -> sympy.Expr:
    if e.is_Atom:
        return e
    args = [_simp(a, ranges) for a in e.args]
    same = all(a is b for a, b in zip(args, e.args))
    name = _fname(e)
    if name in ("Min", "Max"):
        keep = []
        for i, a in enumerate(args):
            redundant = False
            for j, b in enumerate(args):
                if i == j:
                    continue
                diff = bounds(sympy.expand(b - a), ranges)
                # Min: a is never chosen if some b <= a always (ties: keep the earlier one)
                if diff is not None and (
                        (name == "Min" and (diff[1] < 0 or (diff[1] == 0 and j < i))) or
                        (name == "Max" and (diff[0] > 0 or (diff[0] == 0 and j < i)))):
                    redundant = True
                    break
            if not redundant:
                keep.append(a)
        if same and len(keep) == len(args):
            return e  # rebuilding a Min/Max is slow in sympy; nothing changed
        return keep[0] if len(keep) == 1 else (sympy.Min if name == "Min" else sympy.Max)(*keep)
    if name in ("Mod", "PythonMod"):
        a, m = args
        ba = bounds(a, ranges)
        if m.is_Integer and ba is not None and 0 <= ba[0] and ba[1] < int(m):
            return a
    elif name in ("floor", "FloorDiv", "CleanDiv"):
        num, den = _div_parts(e if same else e.func(*args))
        bn = bounds(num, ranges)
        if den.is_Integer and bn is not None and int(den) > 0 and bn[0] // int(den) == bn[1] // int(den):
            return sympy.Integer(bn[0] // int(den))
    return e if same else e.func(*args)


# ------------------------------------------------------------------------------------------- print

def pyexpr(e: Union[sympy.Basic, int], ranges: Ranges | None = None) -> str:
    """Python source for an integer index expression, simplified over ``ranges``.

    ``Min``/``Max`` print as ``min``/``max``, floor division as ``//``, ``Mod`` as ``%``; sums put
    positive terms first so ragged sizes read ``300 - 128 * i0``.
    """
    if isinstance(e, bool):
        raise ExprError(f"boolean {e} used as an index expression")
    if isinstance(e, int):
        return str(e)
    if not isinstance(e, sympy.Basic):
        return _p(simplify(e, ranges))[0]
    # the text depends only on the ranges of e's own symbols: the verifier, the code generator and
    # the printer spell the same offsets and sizes again and again, so the text is kept
    syms = e.free_symbols
    key = (e, tuple(sorted(((s.name, ranges.get(s)) for s in syms), key=str)) if ranges else ())
    try:
        text = _PYEXPR_CACHE.get(key)
    except TypeError:   # a range given as something unhashable: print without keeping it
        return _p(simplify(e, ranges))[0]
    if text is None:
        if len(_PYEXPR_CACHE) >= _PYEXPR_CACHE_SIZE:
            _PYEXPR_CACHE.clear()
        text = _PYEXPR_CACHE[key] = _p(simplify(e, ranges))[0]
    return text


#: printed index expressions by (expression, ranges of its symbols); cleared when full
_PYEXPR_CACHE: dict = {}
_PYEXPR_CACHE_SIZE = 1 << 16


def _wrap(text_prec: tuple[str, int], need: int) -> str:
    text, prec = text_prec
    return f"({text})" if prec < need else text


def _p(e: sympy.Basic) -> tuple[str, int]:
    if e.is_Integer:
        v = int(e)
        return (str(v), _ATOM if v >= 0 else _UNARY)
    if e is sympy.true or e is sympy.false:
        return (str(bool(e)), _ATOM)
    if _fname(e) in _REL_OPS:  # e.g. ``accumulate=k > 0``: a comparison of ints gives a Python bool
        lhs, rhs = e.args
        return (f"{_wrap(_p(lhs), _ADD)} {_REL_OPS[_fname(e)]} {_wrap(_p(rhs), _ADD)}", _CMP)
    if e.is_Symbol:
        return (e.name, _ATOM)
    if e.is_Rational:
        raise ExprError(f"fractional constant {e} in an index expression")
    if e.is_Add:
        return _p_add(e)
    if e.is_Mul:
        return _p_mul(e)
    if e.is_Pow:
        base, ex = e.args
        if ex.is_Integer and int(ex) > 0:
            b = _wrap(_p(base), _UNARY)
            return (" * ".join([b] * int(ex)), _MUL)
        raise ExprError(f"power {e} has no integer form")
    name = _fname(e)
    if name in ("Min", "Max"):
        args = sorted(e.args, key=lambda a: (not a.is_Number, sympy.default_sort_key(a)))
        return (f"{name.lower()}({', '.join(_p(a)[0] for a in args)})", _ATOM)
    if name in ("floor", "FloorDiv", "CleanDiv"):
        num, den = _div_parts(e)
        if den == 1:
            return _p(num)
        return (f"{_wrap(_p(num), _MUL)} // {_wrap(_p(den), _UNARY)}", _MUL)
    if name == "ceiling":
        num, den = _div_parts(e)
        if den == 1:
            return _p(num)
        return _p_floordiv_text(sympy.expand(num + den - 1), den)
    if name in ("Mod", "PythonMod"):
        a, m = e.args
        return (f"{_wrap(_p(a), _MUL)} % {_wrap(_p(m), _UNARY)}", _MUL)
    if name == "ModularIndexing":
        x, d, m = e.args
        inner = _p(x) if d == 1 else (f"{_wrap(_p(x), _MUL)} // {_wrap(_p(d), _UNARY)}", _MUL)
        return (f"{_wrap(inner, _MUL)} % {_wrap(_p(m), _UNARY)}", _MUL)
    if name == "Identity":
        return _p(e.args[0])
    raise ExprError(f"no Python integer form for {name} in {e}")


def _p_floordiv_text(num: sympy.Expr, den: sympy.Expr) -> tuple[str, int]:
    return (f"{_wrap(_p(num), _MUL)} // {_wrap(_p(den), _UNARY)}", _MUL)


def _p_add(e: sympy.Add) -> tuple[str, int]:
    pos_sym, pos_const, neg = [], [], []
    for t in e.as_ordered_terms():
        coeff, _ = t.as_coeff_Mul()
        if coeff.is_negative:
            neg.append(-t)
        elif t.is_Number:
            pos_const.append(t)
        else:
            pos_sym.append(t)
    pos = pos_sym + pos_const
    parts: list[str] = []
    if pos:
        parts.append(_wrap(_p(pos[0]), _ADD))
        parts += [" + " + _wrap(_p(t), _ADD + 1) for t in pos[1:]]
    else:
        parts.append("-" + _wrap(_p(neg[0]), _MUL))
        neg = neg[1:]
    parts += [" - " + _wrap(_p(t), _ADD + 1) for t in neg]
    return ("".join(parts), _ADD)


def _p_mul(e: sympy.Mul) -> tuple[str, int]:
    coeff, rest = e.as_coeff_Mul()
    if not coeff.is_Integer:
        raise ExprError(f"fractional coefficient in index expression {e}")
    if coeff == -1:
        return ("-" + _wrap(_p(rest), _UNARY), _UNARY)
    factors = [] if coeff == 1 else [coeff]
    factors += list(sympy.Mul.make_args(rest))
    out = []
    for i, f in enumerate(factors):
        # a right operand at * level must be parenthesised: a * (b // c) != a * b // c
        out.append(_wrap(_p(f), _MUL if i == 0 else _UNARY))
    return (" * ".join(out), _MUL)


def is_int_valued(e: object) -> bool:
    """True for Python ints and sympy integers (the sizes the verifier can check statically)."""
    if isinstance(e, bool):
        return False
    if isinstance(e, int):
        return True
    return isinstance(e, sympy.Basic) and bool(e.is_Integer)


def fmt_float(v: float) -> str:
    """A float literal that round-trips (``float('inf')`` / ``float('nan')`` for non-finite)."""
    if math.isnan(v):
        return "float('nan')"
    if math.isinf(v):
        return "float('inf')" if v > 0 else "-float('inf')"
    return repr(float(v))
