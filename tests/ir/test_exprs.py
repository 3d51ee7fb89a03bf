"""Index expressions print as exact, readable Python int arithmetic."""
from __future__ import annotations

import itertools

import pytest
import sympy
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from neuron_inductor.ir.exprs import ExprError, bounds, pyexpr, simplify
from neuron_inductor.ir import loop_var

i, j = loop_var("i0"), loop_var("i1")


@pytest.mark.parametrize("expr, text", [
    (sympy.Min(128, 300 - 128 * i), "min(128, 300 - 128 * i0)"),
    (65536 * i + 128, "65536 * i0 + 128"),
    (300 - 128 * i - 5 * j, "300 - 128 * i0 - 5 * j" .replace(" j", " i1")),
    (-i, "-i0"),
    (sympy.floor((i + 1) / 2), "(i0 + 1) // 2"),
    (sympy.ceiling(i / 3), "(i0 + 2) // 3"),
    (sympy.Mod(i, 4), "i0 % 4"),
    (4 * FloorDiv(i + 3, 2), "4 * ((i0 + 3) // 2)"),
    (i * FloorDiv(j, 2), "i0 * (i1 // 2)"),
    (ModularIndexing(i, 2, 4), "i0 // 2 % 4"),
    (sympy.Max(0, i - 5), "max(0, i0 - 5)"),
    (i * i, "i0 * i0"),
    (sympy.Gt(i, 0), "i0 > 0"),
])
def test_prints(expr, text):
    assert pyexpr(expr) == text


def test_printed_text_evaluates_like_sympy():
    exprs = [sympy.Min(128, 300 - 128 * i), 4 * FloorDiv(i + 3 * j, 2) - sympy.Mod(i + 7, 3),
             i * FloorDiv(j, 2), sympy.floor((5 * i + 1) / 3), sympy.ceiling((i + j) / 4), -(i - j) * 3]
    for e in exprs:
        text = pyexpr(e)
        for a, b in itertools.product(range(5), range(5)):
            want = e.subs({i: a, j: b})
            if isinstance(want, sympy.Basic) and not want.is_Integer:  # torch's sympy functions
                want = sympy.simplify(want.doit())
            assert eval(text, {"min": min, "max": max}, {"i0": a, "i1": b}) == int(want), (e, text, a, b)


def test_simplify_with_ranges():
    r = {i: (0, 2), j: (0, 0)}
    assert pyexpr(sympy.Min(512, 700 - 512 * j), r) == "512"  # single trip: the min is decided
    assert pyexpr(sympy.Min(128, 300 - 128 * i), r) == "min(128, 300 - 128 * i0)"  # ragged stays
    assert pyexpr(sympy.Mod(i, 8), r) == "i0"
    assert pyexpr(sympy.Gt(j, 0), r) == "False" and pyexpr(sympy.Ge(i, 0), r) == "True"
    assert simplify(sympy.floor(i / 4), r) == 0


def test_bounds():
    assert bounds(sympy.Min(128, 300 - 128 * i), {i: (0, 2)}) == (44, 128)
    assert bounds(i + j, {i: (0, 2)}) is None


def test_non_integer_refused():
    with pytest.raises(ExprError):
        pyexpr(i / 2)
    with pytest.raises(ExprError):
        pyexpr(sympy.sin(i))


def test_printed_text_is_kept_per_ranges_of_the_expression():
    """pyexpr keeps the text it printed, keyed by the expression and the ranges of its own symbols:
    the same expression under other ranges prints differently, ranges of other symbols do not
    matter, and an unhashable range still prints."""
    e = sympy.Min(128, 300 - 128 * i)
    assert pyexpr(e, {i: (0, 2)}) == "min(128, 300 - 128 * i0)"
    assert pyexpr(e, {i: (0, 1)}) == "128"
    assert pyexpr(e, {i: (0, 2), j: (0, 7)}) == "min(128, 300 - 128 * i0)"
    assert pyexpr(e, {i: (2, 2)}) == "44"
    assert pyexpr(e, {i: [0, 1]}) == "128"
