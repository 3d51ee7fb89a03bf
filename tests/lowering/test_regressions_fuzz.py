"""Programs a differential fuzzer found wrong or broken (tests/fuzz/gen.py, benchmarks/fuzz.py), one
test each, copied as found: forward and, where they have gradients, backward against eager, with no
op left to a host fallback."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from neuron_inductor import stats
from tests._compare import BF16, check


def check_no_fallback(fn, *args, grad: bool = True, **kw):
    stats.reset("compile", "fallback_ops")
    out = check(fn, *args, grad=grad, **kw)
    assert not stats.fallback_ops(), dict(stats.fallback_ops())
    return out


def test_index_select_dim1_softmax_log_softmax_expand_pow_backward_writes_every_tile():
    """Backward stopped with ``[output-not-written] 1536 of 1539 elements`` in 'k3_sum_mul_sub': a
    sum over the partition axis (a column sum) broadcast back over the summed axis was evaluated
    once after the row loops, writing only the first row; index_select's backward along dim 1
    (index_put accumulate on [None, idx]) fell back to the host."""
    torch.manual_seed(0)

    def fn(x1, i0):
        v1 = torch.index_select(x1.softmax(0), 1, i0)
        v3 = v1.log_softmax(-2).unsqueeze(2).expand(513, 3, 4)
        return ((v3.abs() + 1).pow(-1.5),)
    check_no_fallback(fn, torch.randn(513, 3), torch.randint(0, 3, (3,)))


def test_gather_index_smaller_than_input_on_every_dim_has_the_index_shape():
    """Compiled returned [256, 16], eager [1, 16]: the gather's compare broadcast the [1, 1] index
    against all 256 rows of the input."""
    torch.manual_seed(0)

    def f1(x0, w0, w1, x1, x2, i0, w2, w3):
        v2 = (x0 @ w0).to(torch.bfloat16).float() @ w1
        v4 = torch.where(x1 > 0.0, v2, x1) + x2
        return F.linear(torch.gather(v4, -1, i0), w2, w3)
    r = torch.randn
    out = check_no_fallback(f1, r(256, 32), r(32, 100), r(100, 300), r(300), r(256, 1),
                            torch.randint(0, 300, (1, 1)), r(16, 1), r(16), atol=1e-4, rtol=1e-4)
    assert out.shape == (1, 16)


def test_gather_index_with_fewer_rows_than_the_input():
    """Compile error "Attempting to broadcast a dimension of length 7 at -2"."""
    torch.manual_seed(0)

    def f2(x0, i0):
        return torch.gather(x0, 1, i0) * 0.25
    check_no_fallback(f2, torch.randn(7, 16), torch.randint(0, 16, (3, 1)))


def test_where_over_a_strided_slice_that_also_feeds_a_softmax():
    """777 of 1568 elements of the first output were 0.0 (eager -2.75): ``clone(x1[:, 3:100:2])``
    shares the leaf load's tile; the clone's last use recycled it while the cached load still
    served ``where(v5 < 0, v5, 0)``, whose fill then overwrote its own input. The bf16 round trip
    of the attention output makes the other outputs and gradients sensitive to fp32 summation
    order (a rounding flip moves a value by a bf16 ulp), hence bf16 tolerances; the bug was off by
    whole units."""
    torch.manual_seed(0)

    def f3(x0, x1, w0, x2):
        v0 = F.scaled_dot_product_attention(x0, x0, x0)
        v2 = torch.add(F.silu(v0.to(torch.bfloat16)).to(v0.dtype), v0, alpha=0.5)
        v3 = (v2 @ v2.transpose(-1, -2)) * 0.1
        v4 = v3 * torch.rsqrt(v3.pow(2).mean(-1, keepdim=True) + 1e-6) * w0
        v5 = x1[:, 3:100:2]
        v6 = v5.softmax(-2)
        v9 = torch.exp(torch.softmax(torch.maximum(v3, v4), dim=1))
        v11 = torch.where(v5 < 0.0, v5, 0.0) / (x2.abs() + 1)
        return (v11, v9, v6)
    r = torch.randn
    check_no_fallback(f3, r(7, 32, 32, 100), r(32, 300), 1 + 0.1 * r(32), r(49), **BF16)


def test_reduced_shape_value_that_does_not_read_the_reduction_is_not_fused_misaligned():
    """fuzz seed 116: ``[shape] nisa.tensor_scalar: operand0 must be a [128, 1] region, got
    [128, 7]`` in the backward. expand's gradient sums a [7, 7, 1, 513, 1] tangent over axis 1;
    ``tanh(x0)`` ([7, 1, 513, 1], the reduced shape) joined that group without reading the sum,
    so lowering broadcast it right-aligned over the domain (its dim 0 on the summed axis)."""
    torch.manual_seed(116)

    def prog(x0, x1):
        v0 = torch.tanh(x0)
        v1 = torch.add(x1, v0, alpha=0.5)
        v5 = v1.unsqueeze(1).expand(7, 7, 1, 513, 1)
        return (v5,)
    check_no_fallback(prog, torch.randn(7, 1, 513, 1), torch.randn(513, 1))


def test_cosine_embedding_loss_backward():
    """``operand0 must be a [5, 1] region, got [5, 5]`` in 'k0_mul_sum': the same misaligned
    reduced-shape value, a row statistic's input fused next to the sum over rows. Its forward
    builds a constant as ``full_like(empty_permuted(...))``, which ran on the host."""
    torch.manual_seed(0)
    check_no_fallback(lambda a, b, y: F.cosine_embedding_loss(a, b, y), torch.randn(5, 5),
                      torch.randn(5, 5), torch.tensor([1, -1, 1, 1, -1]))


def test_amax_of_an_upcast_bf16_tanh_has_a_gradient():
    """Seed 9052: x0.grad was NaN. The matmul epilogue computed the bf16 ``tanh`` in fp32 and its
    fp32 upcast skipped the bf16 rounding, so the forward's amax was not among the (rounded) saved
    values the backward compares with: zero matches, 0/0."""
    torch.manual_seed(9052)

    def prog(x0, i0, x1):
        v0 = torch.gather(x0, -2, i0)
        v1 = v0 @ x1
        v4 = (v1 @ v1.transpose(-1, -2)) * 0.1
        v5 = torch.tanh(v4.to(torch.bfloat16)).float()
        return (v5.amax(-2),)
    check_no_fallback(prog, torch.randn(300, 1), torch.randint(0, 300, (3, 1)), torch.randn(1, 300))


def test_gather_of_an_elementwise_value_beside_a_cast_and_a_linear():
    """Seed 9123 (``benchmarks/fuzz.py --n 400 --seed 9000``): a whole-graph fallback with
    ``[hbm-bounds] access of in1 reaches elements [0, 1026] outside [0, 3)`` in 'k5_eq_where_sum'
    once ``0.25 - x0`` was rebuilt at the index views of the gather's decomposition (a view-sinking
    pass, since removed): the [1, 3, 1] index was read with the [1, 3, 513] input's strides."""
    torch.manual_seed(9123)

    def fn(x0, i0, x1, x2, x3):
        v2 = torch.gather(0.25 - x0, -2, i0)
        return F.linear(x1, x2, x3), torch.add(x1, v2, alpha=0.5), x0.to(torch.bfloat16).float()
    r = torch.randn
    check_no_fallback(fn, r(1, 3, 513), torch.randint(0, 3, (1, 3, 1)), r(1, 3, 1), r(3, 1), r(3))


def test_reduced_value_broadcast_right_aligned_over_a_non_leading_reduced_axis():
    """fuzz seed 700023: 3071 of 4617 outputs wrong. ``var(x, dim=-3)`` of a [3, 3, 1, 513] input is
    [3, 1, 513]; added to x it broadcasts right-aligned, onto axes (1, 2, 3), but the fused kernel
    read it at the kept axes (0, 2, 3). The add joined through a group merge, which re-checked only
    the merged group's nodes, not the host's, against the reduction's axes; a reduced value moved by
    views (``unsqueeze`` at another axis, ``expand``: the backward of ``x.sum(1) + x``) was read at
    the kept axes too (graph/axis_map.py)."""
    torch.manual_seed(700023)

    def fn(x0):
        return ((torch.var(-x0, dim=-3, correction=0) + x0).abs(),)
    check_no_fallback(fn, torch.randn(3, 3, 1, 513))

    def direct(x):  # the same read with the add joining the reduction's group directly
        return (x.sum(1) * 0.5 + x, x.sum(0) + x)
    check_no_fallback(direct, torch.randn(4, 4, 8))

    def viewed(x):  # sum(0) as [4, 8], then unsqueezed at axis 1 and expanded: dims (1, 2) -> (0, 2)
        return (x.sum(0).unsqueeze(1).expand(4, 4, 8) + x, x.sum(0, keepdim=True).expand(4, 4, 8) * x)
    check_no_fallback(viewed, torch.randn(4, 4, 8))


def test_widening_cast_recomputed_in_a_reduction_group_read_through_unsqueeze():
    """fuzz seed 701306: x0.grad wrong in 178 of 300 elements. gather's backward (a [300, 300]
    compare-and-sum over axis 0) read the gradient's bf16 -> fp32 cast through ``unsqueeze(-1)``, on
    axis 0; the cast, recomputed inside that group as a [300] value of the reduced space (the kept
    axis 1), was read at axis 1. Recomputed casts are now checked like any member's reads."""
    torch.manual_seed(701306)

    def prog(x0, i0, x1, x2):
        v0 = torch.gather(x0, -1, i0)
        v2 = torch.maximum(x0, torch.maximum(x0, x0))
        return (F.linear(v2, x1, x2), v0.to(torch.bfloat16).float(), v2[116:144:3])
    check_no_fallback(prog, torch.randn(300), torch.randint(0, 300, (300,)), torch.randn(1, 300),
                      torch.randn(1))

    def chained(x0, i0, i1):  # fuzz seed 701514: 98 of 100 forward outputs wrong, same cause
        v0 = torch.gather(x0, -1, i0)
        v1 = torch.gather(v0, -1, i1)
        return (v1[47:246:2].to(torch.bfloat16).float(), v0 + x0, torch.where(x0 >= 0.5, x0, v1))
    torch.manual_seed(701514)
    check_no_fallback(chained, torch.randn(300), torch.randint(0, 300, (300,)),
                      torch.randint(0, 300, (300,)))


def test_reduced_value_expanded_on_a_new_axis_of_the_reduced_axis_size():
    """fuzz seed 900017: x0.grad wrong in 23844 of 32319 elements. The backward sums the tangent
    over its last axis (size 3) in a [7, 1, 3, 513, 3] domain, and expands the result over dim 1 to
    [7, 3, 3, 513]: that output has the domain's size, so the group held it as the domain
    flattened, and the expand's new 3 landed on the reduced axis (stored with the wrong strides).
    A value of the domain's size but another shape now maps onto domain axes only when its dims
    are the domain's own (unit dims aside); otherwise the reduced value's read is not fused."""
    torch.manual_seed(900017)

    def prog(x0, x1):
        v1 = torch.where(x0.mean(1, keepdim=True) < x1, x0.mean(1, keepdim=True), -1.0)
        return (v1.unsqueeze(4).expand(7, 1, 3, 513, 3),)
    check_no_fallback(prog, torch.randn(7, 3, 3, 513), torch.randn(7, 1, 3, 513))

    def flat_ok(x):  # the domain's own dims, squeezed: still fused and right
        return ((x.sum(-1, keepdim=True) * x).squeeze(1),)
    check_no_fallback(flat_ok, torch.randn(7, 1, 3, 5, 3))


def test_reduction_read_through_a_view_and_later_directly_keeps_its_tile():
    """fuzz seed 940200: x0.grad NaN in all 130 elements. The backward reads ``amax`` first through
    ``unsqueeze`` (mul_1) and later through ``alias -> view`` (the amax gradient's ``eq``). The
    view shared the reduction's tile and counted it as its own: at the view's last use the tile was
    recycled and ``mul_2`` overwrote the maximum before ``eq`` read it."""
    torch.manual_seed(940200)

    def prog(x0):
        v1 = x0.amax(1)
        v2 = v1.unsqueeze(1)
        return (v2 * x0,)
    check_no_fallback(prog, torch.randn(130, 1))

    def wide(x0, x1):  # the same order of reads over a reduced axis of 300
        m = x0.amax(1)
        a = m.unsqueeze(1) * x1
        return (a + x1 * x0, (m.view(-1, 1) == x0).float() * x1)
    check_no_fallback(wide, torch.randn(130, 300), torch.randn(130, 300), grad=False)

    def keepdim(x0, x1):  # fuzz seed 940455: x0.grad NaN, amax(keepdim) read through a reshape
        v1 = x0.amax(-2, keepdim=True)
        v4 = v1.reshape(3)
        v7 = torch.var(torch.minimum(v1, v4), dim=-1, correction=0, keepdim=True)
        return (F.linear(v7, x1), v4 - v4, torch.cos(v1))
    torch.manual_seed(940455)
    check_no_fallback(keepdim, torch.randn(1, 3), torch.randn(300, 1))
