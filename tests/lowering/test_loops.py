"""The shared loop-nest helpers (lowering/loops.py) and the fused tile plan's flat split."""
from __future__ import annotations

import sympy

from neuron_inductor.ir import Loop
from neuron_inductor.lowering.builder import KernelBuilder
from neuron_inductor.lowering.fused.tiling import split_rows
from neuron_inductor.lowering.loops import largest_divisor, merge, nest, ragged, split_axis, tiles
from neuron_inductor.target import get_target


def test_ragged_last_step():
    v = sympy.Symbol("v", integer=True, nonnegative=True)
    assert ragged(100, 128, v) == 100               # one step covers everything
    assert ragged(256, 128, v) == 128               # exact steps
    assert ragged(300, 128, v) == sympy.Min(128, 300 - 128 * v)
    assert ragged(300, 128, v).subs(v, 2) == 44     # the ragged tail


def test_nest_opens_no_single_iteration_loops():
    kb = KernelBuilder("k", get_target("trn2"))
    with nest(kb, [1, 3, 1, 5], "affine", "l") as vs, tiles(kb, 130, 128, "sequential", "p") as (ip, rows):
        assert vs[0] == 0 and vs[2] == 0
        assert rows == sympy.Min(128, 130 - 128 * ip)
    loops = [kb.body[0], kb.body[0].body[0], kb.body[0].body[0].body[0]]
    assert all(isinstance(lp, Loop) for lp in loops)
    assert [(lp.extent, lp.kind) for lp in loops] == [(3, "affine"), (5, "affine"), (2, "sequential")]


def test_merge_and_split():
    # [4, 8, 16] contiguous for both accesses except a broadcast of the middle dim in the second
    dims, st = merge([4, 1, 8, 16], [[128, 0, 16, 1], [16, 0, 0, 1]])
    assert dims == [4, 8, 16] and st == [[128, 16, 1], [16, 0, 1]]
    dims, st = merge([4, 8, 16], [[128, 16, 1]])
    assert dims == [512] and st == [[1]]
    assert largest_divisor(154800, 128) == 120 and largest_divisor(127, 64) == 1
    assert split_axis([0, 3], 1, 600, 120) == [15, 3]


def test_flat_split_keeps_a_quarter_of_the_partitions_busy():
    assert split_rows(154800, 128) == 120    # 2*129*600: [120, 1290]
    assert split_rows(2 * 127, 128) == 127   # 127 partitions of 2 elements
    assert split_rows(31 * 37, 128) == 37    # >= 32 partitions
    assert split_rows(2 * 31 * 31, 128) == 62
    assert split_rows(7 * 1009, 128) == 1    # only 7 would work: stay on one partition
    assert split_rows(40, 128) == 1          # too small to split
