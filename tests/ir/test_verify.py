"""The IR verifier accepts legal kernels and refuses each rule with a message naming kernel, rule and
statement."""
from __future__ import annotations

from typing import Callable

import pytest
import sympy

from neuron_inductor.ir import (Alloc, Dma, Empty, Fallback, HBMAccess, HBMTensor, Instr, Kernel, KernelCall,
                                Loop, Program, Ref, TensorMeta, Tile, View, loop_var)
from neuron_inductor.ir.verify import IRVerificationError, verify_kernel, verify_program
from neuron_inductor.target import TRN1, TRN2

pytestmark = pytest.mark.nonconforming  # builds kernels that break rules on purpose

P = 128


def base(mutate: Callable | None = None) -> Kernel:
    """y = x + 1 over [300, 64] in ragged 128-row tiles; ``mutate(ns)`` edits the pieces first."""
    ns = {}
    ns["x"] = HBMTensor("x", 300 * 64, "float32")
    ns["out"] = HBMTensor("out0", 300 * 64, "float32", "output")
    ns["i"] = i = loop_var("i0")
    ns["pr"] = sympy.Min(P, 300 - P * i)
    ns["t"] = Tile("t", (P, 64), "float32")
    ns["u"] = Tile("u", (P, 64), "float32")
    ns["load"] = lambda t=None: Dma(
        (t or ns["t"]).region(ns["pr"], 64), HBMAccess(ns["x"], P * 64 * ns["i"], ((64, ns["pr"]), (1, 64))))
    ns["store"] = lambda t=None: Dma(
        HBMAccess(ns["out"], P * 64 * ns["i"], ((64, ns["pr"]), (1, 64))), (t or ns["u"]).region(ns["pr"], 64))
    ns["add"] = lambda: Instr("vector", "tensor_scalar", ns["u"].region(ns["pr"], 64),
                              {"data": ns["t"].region(ns["pr"], 64)}, {"op0": "add", "operand0": 1.0})
    ns["allocs"] = lambda: [Alloc(ns["t"]), Alloc(ns["u"])]
    ns["body"] = lambda: ns["allocs"]() + [ns["load"](), ns["add"](), ns["store"]()]
    ns["params"] = [ns["x"]]
    if mutate:
        mutate(ns)
    body = [Loop(ns["i"], 3, "affine", ns["body"]())]
    return Kernel("k_test", ns["params"], [ns["out"]], body)


def refuse(k: Kernel, rule: str, target=TRN2) -> IRVerificationError:
    with pytest.raises(IRVerificationError) as info:
        verify_kernel(k, target)
    assert info.value.rule == rule, str(info.value)
    assert "kernel k_test" in str(info.value) and f"[{rule}]" in str(info.value)
    return info.value


def test_base_is_legal():
    verify_kernel(base(), TRN2)


def test_partition_limit():
    big = Tile("big", (256, 4), "float32")
    e = refuse(base(lambda ns: ns.update(allocs=lambda: [Alloc(ns["t"]), Alloc(ns["u"]), Alloc(big)])),
               "partition-limit")
    assert "alloc big" in e.stmt and "256" in e.detail


def test_tile_rank():
    t = Tile("flat", (P, 4), "float32")
    # Tile refuses rank 1 at construction and is frozen; the verifier still checks IR that got
    # around both
    object.__setattr__(t, "shape", (P,))
    refuse(base(lambda ns: ns.update(allocs=lambda: [Alloc(ns["t"]), Alloc(ns["u"]), Alloc(t)])), "tile-rank")


def test_psum_tile_larger_than_a_bank():
    ps = Tile("ps", (P, 1024), "float32", "psum")  # 4 KiB per partition, a bank is 2 KiB
    refuse(base(lambda ns: ns.update(allocs=lambda: [Alloc(ns["t"]), Alloc(ns["u"]), Alloc(ps)])),
           "psum-bank-size")


def test_psum_banks_per_scope_chain():
    outer = [Tile(f"po{n}", (P, 512), "float32", "psum") for n in range(4)]
    inner = [Tile(f"pi{n}", (P, 512), "float32", "psum") for n in range(5)]

    def mutate(ns, inner=inner):
        ns["allocs"] = lambda: [Alloc(ns["t"]), Alloc(ns["u"])] + [Alloc(t) for t in inner]
    k = base(mutate)
    k.body[:] = [Alloc(t) for t in outer] + k.body  # 4 outside + 5 in the loop body = 9 > 8
    e = refuse(k, "psum-banks")
    assert "9 PSUM tiles" in e.detail
    # sibling loops do not add up: 4 outer + max(4, 4) inner = 8 is fine
    k2 = base(lambda ns: mutate(ns, inner[:4]))
    j = loop_var("j0")
    k2.body[:] = [Alloc(t) for t in outer] + k2.body + [Loop(j, 2, "affine", [Alloc(t) for t in inner[:4]])]
    verify_kernel(k2, TRN2)


def test_alloc_inside_loop_counts_once_for_sbuf():
    # 150 KiB in a loop body (reused each iteration) fits trn2's 208 KiB; 64 KiB more outside does not
    big = Tile("big", (P, 150 * 256), "float32")
    k = base(lambda ns: ns.update(allocs=lambda: [Alloc(ns["t"]), Alloc(ns["u"]), Alloc(big)]))
    verify_kernel(k, TRN2)
    extra = Tile("extra", (P, 16 * 1024), "float32")
    k.body[:] = [Alloc(extra)] + k.body
    e = refuse(k, "sbuf-capacity", TRN2)
    assert "big=153600" in e.detail and "extra=65536" in e.detail


def test_matmul_memories_and_limits():
    def with_mm(st_mem="sbuf", dst_mem="psum", k_size=P, n=64, dst_dtype="float32"):
        st = Tile("st", (P, P), "float32", st_mem)
        mv = Tile("mv", (P, 1024), "float32")
        acc = Tile("acc", (P, 512 if n <= 512 else 1024), dst_dtype, dst_mem)
        def mutate(ns):
            ns["allocs"] = lambda: [Alloc(ns["t"]), Alloc(ns["u"]), Alloc(st), Alloc(mv), Alloc(acc)]
            mm = Instr("tensor", "nc_matmul", acc.region(P, n), {"stationary": st.region(k_size, P),
                                                                  "moving": mv.region(k_size, n)})
            ns["body"] = lambda: ns["allocs"]() + [ns["load"](), ns["add"](), mm, ns["store"]()]
        return base(mutate)
    verify_kernel(with_mm(), TRN2)
    refuse(with_mm(st_mem="psum"), "memory")
    refuse(with_mm(dst_mem="sbuf"), "memory")
    refuse(with_mm(dst_dtype="bfloat16"), "matmul-dtype")
    e = refuse(with_mm(n=1024), "psum-bank-size")  # the 1024-wide PSUM tile is refused first
    assert "acc" in e.detail


def test_matmul_static_sizes():
    st, mv = Tile("st", (P, P), "float32"), Tile("mv", (P, 512), "float32")
    acc = Tile("acc", (P, 512), "float32", "psum")
    def mutate(ns):
        ns["allocs"] = lambda: [Alloc(ns["t"]), Alloc(ns["u"]), Alloc(st), Alloc(mv), Alloc(acc)]
        mm = Instr("tensor", "nc_matmul", acc.region(P, 512), {"stationary": st.region(P, P),
                                                                "moving": mv.region(64, 512)})
        ns["body"] = lambda: ns["allocs"]() + [ns["load"](), mm, ns["add"](), ns["store"]()]
    e = refuse(base(mutate), "matmul-shape")
    assert "K differs (128 vs 64)" in e.detail


def test_gpsimd_never_psum():
    ps = Tile("ps", (P, 64), "float32", "psum")
    def mutate(ns):
        ns["allocs"] = lambda: [Alloc(ns["t"]), Alloc(ns["u"]), Alloc(ps)]
        ms = Instr("gpsimd", "memset", ps.region(P, 64), {}, {"value": 0.0})
        ns["body"] = lambda: ns["allocs"]() + [ms, ns["load"](), ns["add"](), ns["store"]()]
    e = refuse(base(mutate), "gpsimd-no-psum")
    assert "GpSimd" in e.detail and "gpsimd.memset" in e.stmt


def test_dma_is_hbm_sbuf_only():
    ps = Tile("ps", (P, 64), "float32", "psum")
    def to_psum(ns):
        ns["allocs"] = lambda: [Alloc(ns["t"]), Alloc(ns["u"]), Alloc(ps)]
        ns["body"] = lambda: ns["allocs"]() + [ns["load"](ps), ns["load"](), ns["add"](), ns["store"]()]
    refuse(base(to_psum), "memory")
    def sbuf_to_sbuf(ns):
        ns["body"] = lambda: ns["allocs"]() + [ns["load"](), Dma(ns["u"].region(P, 64), ns["t"].region(P, 64)),
                                               ns["add"](), ns["store"]()]
    refuse(base(sbuf_to_sbuf), "dma-memory")


def test_compute_never_takes_hbm():
    def mutate(ns):
        bad = Instr("vector", "tensor_copy", ns["u"].region(ns["pr"], 64),
                    {"src": HBMAccess(ns["x"], 0, ((64, ns["pr"]), (1, 64)))})
        ns["body"] = lambda: ns["allocs"]() + [ns["load"](), bad, ns["add"](), ns["store"]()]
    refuse(base(mutate), "hbm-operand")


@pytest.mark.parametrize("axis, ok", [((1,), True), ((0,), False), ((0, 1), False), (1, True)])
def test_reduce_axis(axis, ok):
    r = Tile("r", (P, 1), "float32")
    def mutate(ns):
        ns["allocs"] = lambda: [Alloc(ns["t"]), Alloc(ns["u"]), Alloc(r)]
        red = Instr("vector", "tensor_reduce", r.region(ns["pr"], 1), {"data": ns["t"].region(ns["pr"], 64)},
                    {"op": "add", "axis": axis})
        ns["body"] = lambda: ns["allocs"]() + [ns["load"](), red, ns["add"](), ns["store"]()]
    if ok:
        verify_kernel(base(mutate), TRN2)
    else:
        refuse(base(mutate), "reduce-axis")


def test_output_must_be_written():
    e = refuse(base(lambda ns: ns.update(body=lambda: ns["allocs"]() + [ns["load"](), ns["add"]()])),
               "output-written")
    assert "out0" in e.detail


def test_input_parameter_is_read_only():
    def mutate(ns):
        wr = Dma(HBMAccess(ns["x"], P * 64 * ns["i"], ((64, ns["pr"]), (1, 64))), ns["u"].region(ns["pr"], 64))
        ns["body"] = lambda: ns["allocs"]() + [ns["load"](), ns["add"](), wr, ns["store"]()]
    refuse(base(mutate), "readonly-param")


def test_alloc_before_use_and_scope():
    refuse(base(lambda ns: ns.update(body=lambda: [ns["load"](), *ns["allocs"](), ns["add"](), ns["store"]()])),
           "alloc-before-use")
    # a tile allocated inside a loop is dead after it
    k = base()
    k.body.append(Dma(HBMAccess(k.outputs[0], 0, ((64, 1), (1, 64))), k.body[0].body[0].tile.region(1, 64)))
    refuse(k, "alloc-before-use")


def test_loop_var_used_outside_its_loop():
    k = base()
    i = k.body[0].var
    z = Tile("z", (P, 4), "float32")
    # after the loop, a region starting at column i0: the loop variable is out of scope
    k.body.extend([Alloc(z), Instr("vector", "memset", z.region(P, 1, starts=(0, i)), {}, {"value": 0.0})])
    e = refuse(k, "loop-var-scope")
    assert "['i0'] used outside their loop" in e.detail


def test_dma_shapes_must_match():
    def mutate(ns):
        ld = Dma(ns["t"].region(ns["pr"], 32), HBMAccess(ns["x"], P * 64 * ns["i"], ((64, ns["pr"]), (1, 64))))
        ns["body"] = lambda: ns["allocs"]() + [ld, ns["add"](), ns["store"]()]
    refuse(base(mutate), "dma-shape")


def test_region_and_hbm_bounds_are_exact_for_ragged_tiles():
    # ragged last tile: exact, no false alarm (covered by test_base_is_legal); one row too many is refused
    refuse(base(lambda ns: ns.update(pr=sympy.Min(P, 301 - P * ns["i"]))), "hbm-bounds")
    refuse(base(lambda ns: ns.update(pr=sympy.Min(P + 1, 300 - P * ns["i"]))), "region-bounds")


def test_unique_names():
    def mutate(ns):
        ns["u"] = Tile("t", (P, 64), "float32")  # same name as another tile
    refuse(base(mutate), "unique-names")


def test_message_names_statement():
    e = refuse(base(lambda ns: ns.update(body=lambda: [ns["load"](), *ns["allocs"](), ns["add"](), ns["store"]()])),
               "alloc-before-use")
    assert e.stmt.startswith("dma.load t[0:min(128, 300 - 128 * i0), 0:64] <- x.ap(")


def test_verify_program_names_and_kernels():
    k = base()
    meta = TensorMeta((300, 64), (64, 1), 0, "float32")
    good = Program("g", ["a0"], [meta], steps=[KernelCall(k, ["a0"], ["o"], [meta]), View("v", "o", meta),
                                                Empty("e", TensorMeta((0,), (1,), 0, "float32")),
                                                Fallback(["f"], "aten.relu.default", (Ref("v"),), {}, reason="r")],
                   outputs=[Ref("f"), Ref("e"), None])
    verify_program(good, TRN1)
    bad = Program("g", ["a0"], [meta], steps=[View("v", "o", meta)], outputs=[Ref("v")])
    with pytest.raises(IRVerificationError, match="uses 'o' before it is defined"):
        verify_program(bad, TRN1)
    k2 = base()
    twins = Program("g", ["a0"], [meta], steps=[KernelCall(k, ["a0"], ["o"], [meta]),
                                                 KernelCall(k2, ["a0"], ["p"], [meta])], outputs=[])
    with pytest.raises(IRVerificationError, match="two different kernels"):
        verify_program(twins, TRN1)


def test_transpose_limits_and_memories():
    src, ps = Tile("src", (P, 256), "float32"), Tile("tp", (P, 256), "float32", "psum")
    def mutate(ns, engine="tensor", cols=256, dst=ps):
        ns["allocs"] = lambda: [Alloc(ns["t"]), Alloc(ns["u"]), Alloc(src), Alloc(ps)]
        tr = Instr(engine, "nc_transpose", dst.region(P, P), {"data": src.region(P, cols)})
        ns["body"] = lambda: ns["allocs"]() + [ns["load"](), tr, ns["add"](), ns["store"]()]
    refuse(base(mutate), "transpose-shape")  # TensorE transposes at most 128 x 128
    refuse(base(lambda ns: mutate(ns, engine="vector", cols=64)), "transpose-shape")  # VectorE: 32 x 32
    refuse(base(lambda ns: mutate(ns, cols=P, dst=src)), "memory")  # TensorE writes PSUM


def test_tensor_tensor_inputs_not_both_psum():
    a, b = Tile("pa", (P, 64), "float32", "psum"), Tile("pb", (P, 64), "float32", "psum")
    def mutate(ns):
        ns["allocs"] = lambda: [Alloc(ns["t"]), Alloc(ns["u"]), Alloc(a), Alloc(b)]
        tt = Instr("vector", "tensor_tensor", ns["u"].region(P, 64), {"data1": a.region(P, 64),
                                                                     "data2": b.region(P, 64)}, {"op": "add"})
        ns["body"] = lambda: ns["allocs"]() + [ns["load"](), ns["add"](), tt, ns["store"]()]
    refuse(base(mutate), "psum-inputs")


def test_unknown_hbm_tensor():
    stray = HBMTensor("stray", 300 * 64, "float32")
    def mutate(ns):
        ld = Dma(ns["t"].region(ns["pr"], 64), HBMAccess(stray, P * 64 * ns["i"], ((64, ns["pr"]), (1, 64))))
        ns["body"] = lambda: ns["allocs"]() + [ld, ns["add"](), ns["store"]()]
    refuse(base(mutate), "unknown-hbm")


def test_sibling_loops_may_reuse_a_loop_variable():
    k = base()
    k.body.append(Loop(k.body[0].var, 1, "affine", []))
    verify_kernel(k, TRN2)
