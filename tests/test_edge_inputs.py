"""Edge inputs through torch.compile(backend="neuron"): 0-dim and empty tensors, size-1 dims,
non-contiguous and transposed inputs, broadcasting, int64/bool inputs, input mutation, and graphs
that return an input or a view of one."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "lowering"))
from _ops import check_cases, randn  # noqa: E402


def _compile(fn, **options):
    torch._dynamo.reset()
    return torch.compile(fn, backend="neuron", options={"fallback": "error", **options})


def test_zero_dim():
    check_cases(lambda x, y: (x * y + 1, (x * y).exp()), [(torch.tensor(1.5), torch.tensor(-0.5))],
                grad=True)
    check_cases(lambda x, s: x * s, [(randn((300, 130)), torch.tensor(3.0))], grad=True)


def test_zero_size():
    check_cases(lambda x: (x.exp() + 1, x.sum(-1)), [(randn((0, 130)),), (randn((4, 0, 3)),)])


def test_size_one_dims():
    check_cases(lambda x, y: (x + y).sum(1) * x.squeeze(1).mean(), [(randn((300, 1, 1)), randn((1, 5, 1), seed=1))],
                grad=True)


def test_non_contiguous_and_transposed():
    x = randn((130, 300))
    y = randn((300, 260), seed=1)[:, ::2]      # stride 2 along the free axis
    z = randn((2, 300, 130), seed=2).permute(1, 0, 2)
    check_cases(lambda x, y, z: (x.t() * y.exp(), (z + 1).sum(-1), x.t().softmax(-1)),
                [(x, y, z)], grad=True)


def test_broadcasting():
    check_cases(lambda a, b, c: a + b * c, [(randn((2, 1, 130)), randn((300, 1), seed=1),
                                             randn((130,), seed=2))], grad=True)


def test_int64_and_bool_inputs():
    i = torch.randint(-1000, 1000, (300, 130))
    m = torch.rand(300, 130, generator=torch.Generator().manual_seed(0)) > 0.5
    x = randn((300, 130))
    check_cases(lambda i, m, x: (i + 3, i * 2 > 5, torch.where(m, x, i.float()), m & (i > 0),
                                 (i.float() * x).sum(-1)), [(i, m, x)],
                atol=1e-2)  # sums of 130 terms of magnitude up to 1000 in another order


def test_int64_large_values_are_not_silently_wrong():
    """int64 is narrowed to int32 words: values in int32 range must round-trip exactly."""
    i = torch.tensor([2**31 - 1, -2**31, 0, -1, 12345])
    check_cases(lambda i: (i.clone(), i + 0, i * 1), [(i,)])


def test_mutate_input_under_no_grad():
    x = randn((300, 130))
    ref = x.clone()
    f = _compile(lambda x: x.add_(1))
    with torch.no_grad():
        out = f(x)
    torch.testing.assert_close(x, ref + 1)
    torch.testing.assert_close(out, ref + 1)


def test_copy_into_buffer():
    buf = torch.zeros(300, 130)
    y = randn((300, 130))

    def fn(buf, y):
        buf.copy_(y * 2)
        return buf.sum()
    f = _compile(fn)
    out = f(buf, y)
    torch.testing.assert_close(buf, y * 2)
    torch.testing.assert_close(out, (y * 2).sum(), atol=1e-3, rtol=1e-5)


def test_copy_into_buffer_slice():
    buf = torch.zeros(8, 130)
    y = randn((3, 130))

    def fn(buf, y):
        buf[2:5].copy_(y.exp())
    f = _compile(fn)
    f(buf, y)
    expect = torch.zeros(8, 130)
    expect[2:5] = y.exp()
    torch.testing.assert_close(buf, expect)


def test_returns_input_and_view():
    x = randn((300, 130))

    def fn(x):
        return x, x.t(), x[1:], x.view(130, 300), x * 2
    f = _compile(fn)
    out = f(x)
    assert out[0] is x or out[0].data_ptr() == x.data_ptr()
    torch.testing.assert_close(out[1], x.t())
    torch.testing.assert_close(out[2], x[1:])
    torch.testing.assert_close(out[3], x.view(130, 300))
    torch.testing.assert_close(out[4], x * 2)
    x.add_(1)   # the returned views alias the input like eager
    torch.testing.assert_close(out[1], x.t())


def test_inputs_at_other_storage_offsets_reuse_the_graph():
    """A per-expert slice of a packed weight (dbrx: ``w1.view(E, F, H)[e]``) is a graph input whose
    storage offset changes from call to call, and Dynamo does not guard offsets (nor does our cache
    key hold them): one compiled graph serves every expert. Views of inputs the host wrapper builds
    (here the transposed weights saved for backward) used to bake the first call's absolute offset,
    so every other expert's backward read expert 0's weights (dbrx: w1/v1 gradients 72% off)."""
    w1, w2 = randn((3 * 8, 16)), randn((3 * 8, 16), seed=1)
    x, g = randn((5, 16), seed=2), randn((5, 16), seed=3)

    def glu(x, w1, w2):
        return torch.nn.functional.silu(x.matmul(w1.T)).matmul(w2)
    f = _compile(glu)
    for e in (2, 0, 1):  # first compiled at a nonzero offset, then reused at others
        got = [w.clone().requires_grad_(True) for w in (w1, w2)]
        ref = [w.clone().requires_grad_(True) for w in (w1, w2)]
        out = f(x, *[w.view(3, 8, 16)[e] for w in got])
        expect = glu(x, *[w.view(3, 8, 16)[e] for w in ref])
        torch.testing.assert_close(out, expect)
        out.backward(g)
        expect.backward(g)
        for a, b in zip(got, ref):
            torch.testing.assert_close(a.grad, b.grad)
