"""Hand-written NKI kernels registered for custom ops run inside compiled graphs.

The kernel under test is the one ``examples/nki_vit_mlp.py`` ships (loaded from there, so the test
checks exactly what users copy). Each compiled run uses ``fallback="error"``: the op running on the
host instead of its kernel would fail the test, and ``user_kernel_calls`` proves the call was
emitted. Tolerances are the fp32 ones of ``_compare`` (the kernel computes in fp32; only the
summation order differs from eager). Gradients sum hundreds of rows, so their absolute tolerance
scales with their magnitude (1e-4 x the largest entry, at least 1e-4): eager fp32 itself is 1.4e-4
off a float64 reference on a gradient of magnitude 27 here, and 1.5e-5 on a bias gradient of
magnitude 1 that sums 300 rows; a wrong kernel is off by O(1).
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import neuron_inductor
from neuron_inductor import stats
from neuron_inductor.codegen.check import KernelCheckError
from neuron_inductor.runtime.nki import nki, nl, nisa
from neuron_inductor.user_kernels import UserKernelError, registered

FP32 = dict(rtol=1e-5, atol=1e-5)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nki_vit_mlp.py"


@pytest.fixture(scope="module")
def ex():
    spec = importlib.util.spec_from_file_location("nki_vit_mlp_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    sys.path.insert(0, str(EXAMPLE.parent))  # the example imports its sibling helper ``_proof``
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(EXAMPLE.parent))
    return mod


def _close_grad(got: Tensor, want: Tensor) -> None:
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4 * max(1.0, want.abs().max().item()))


def _params(d: int, i: int, seed: int = 0) -> list[Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(i, d, generator=g) * d ** -0.5, torch.randn(i, generator=g),
            torch.randn(d, i, generator=g) * i ** -0.5, torch.randn(d, generator=g)]


def _fwd_bwd(fn, args, compiled: bool):
    args = [a.detach().clone().requires_grad_(True) for a in args]
    if compiled:
        torch._dynamo.reset()
        fn = torch.compile(fn, backend="neuron", options={"fallback": "error"})
    out = fn(*args)
    (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
    return out.detach(), [a.grad for a in args]


@pytest.mark.parametrize("n,d,i", [(300, 64, 256), (1, 16, 40), (128, 128, 128)])
def test_kernel_op_matches_eager_forward_and_backward(ex, n, d, i):
    """Ragged rows across three 128-row tiles and two hidden blocks; a single row; exact tiles."""
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(3))
    args = [x] + _params(d, i)
    stats.reset("compile", "fallback_ops")
    got, got_grads = _fwd_bwd(ex.vit_mlp, args, compiled=True)
    want, want_grads = _fwd_bwd(ex.vit_mlp, args, compiled=False)
    torch.testing.assert_close(got, want, **FP32)
    for g, w in zip(got_grads, want_grads):
        _close_grad(g, w)
    assert stats.compiled()["user_kernel_calls"] == 1
    assert not stats.fallback_ops()


def test_generated_module_holds_the_kernel_and_calls_it(ex, tmp_path):
    """The kernel's source is in the graph's kernels module (statically checked with the rest) and
    the wrapper calls it once, with no host compute around it."""
    from neuron_inductor import config
    dbg = tmp_path / "dbg"
    args = [torch.randn(20, 32)] + _params(32, 64)
    with config.patch(debug_dir=str(dbg)):
        torch.compile(ex.vit_mlp, backend="neuron", options={"fallback": "error"})(*args)
    (graph,) = [p for p in dbg.iterdir() if "inference" in p.name or "forward" in p.name]
    kernels = (graph / "kernels.py").read_text()
    wrapper = (graph / "wrapper.py").read_text()
    assert "def user_nki_examples_vit_mlp_vit_mlp_kernel(x, w1, b1, w2, b2):" in kernels
    assert "    P = 128" in kernels  # the module constant the kernel reads, inlined
    assert wrapper.count("kernels.user_nki_examples_vit_mlp_vit_mlp_kernel(") == 1
    assert "host.count_fallback(" not in wrapper


def test_non_contiguous_inputs_are_copied_by_a_kernel_first(ex):
    """A transposed weight and a strided row slice reach the kernel dense (a generated copy)."""
    g = torch.Generator().manual_seed(5)
    x_big = torch.randn(150, 48, generator=g)
    w1t = torch.randn(48, 96, generator=g) * 0.2
    b1, w2, b2 = torch.randn(96, generator=g), torch.randn(48, 96, generator=g) * 0.1, torch.randn(48, generator=g)

    def fn(x_big, w1t, b1, w2, b2):
        return ex.vit_mlp(x_big[::2], w1t.t(), b1, w2, b2)

    args = [x_big, w1t, b1, w2, b2]
    stats.reset("compile", "fallback_ops")
    got, got_grads = _fwd_bwd(fn, args, compiled=True)
    want, want_grads = _fwd_bwd(fn, args, compiled=False)
    torch.testing.assert_close(got, want, **FP32)
    for a, b in zip(got_grads, want_grads):
        _close_grad(a, b)
    assert stats.compiled()["user_kernel_calls"] == 1 and not stats.fallback_ops()


# ----------------------------------------------------------------------------- a second kernel

@nki.jit
def scale_rows_kernel(x, s):
    """out = x * s for x [N, F] (F <= 512) and a Python float s."""
    N, F = x.shape
    out = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range((N + 127) // 128):
        n = min(128, N - r * 128)
        t = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:n, 0:F], src=x[r * 128:r * 128 + n, 0:F])
        nisa.activation(dst=t[0:n, 0:F], op=nl.copy, data=t[0:n, 0:F], scale=s)
        nisa.dma_copy(dst=out[r * 128:r * 128 + n, 0:F], src=t[0:n, 0:F])
    return out


@torch.library.custom_op("nki_tests::scale_rows", mutates_args=())
def scale_rows(x: Tensor, s: float) -> Tensor:
    return x * s


@scale_rows.register_fake
def _(x, s):
    return torch.empty_like(x)


BACKWARD_CALLS = []


def _scale_setup(ctx, inputs, output):
    ctx.s = inputs[1]


def _scale_backward(ctx, g):
    BACKWARD_CALLS.append(ctx.s)
    return scale_rows(g, ctx.s), None  # the gradient is the same op: its kernel runs again


def test_user_backward_and_scalar_arguments():
    neuron_inductor.register_nki_kernel(scale_rows, scale_rows_kernel, backward=_scale_backward,
                                        setup_context=_scale_setup)
    x = torch.randn(130, 24, generator=torch.Generator().manual_seed(2))
    BACKWARD_CALLS.clear()
    stats.reset("compile", "fallback_ops")
    got, (gx,) = _fwd_bwd(lambda t: scale_rows(t, -2.5), [x], compiled=True)
    assert BACKWARD_CALLS == [-2.5]  # traced once into the backward graph
    torch.testing.assert_close(got, x * -2.5, **FP32)
    w = torch.linspace(-1, 1, x.numel()).reshape(x.shape)
    torch.testing.assert_close(gx, w * -2.5, **FP32)
    assert stats.compiled()["user_kernel_calls"] == 2  # forward and backward graphs each call it


@nki.jit
def wrong_shape_kernel(x, s):
    N, F = x.shape
    out = nl.ndarray((N, F + 1), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((N, F + 1), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=t[0:N, 0:F + 1], value=0.0)
    nisa.dma_copy(dst=out[0:N, 0:F + 1], src=t[0:N, 0:F + 1])
    return out


def test_kernel_returning_the_wrong_shape_is_a_clear_error():
    neuron_inductor.register_nki_kernel(scale_rows, wrong_shape_kernel, backward=None)
    try:
        with pytest.raises(Exception, match=r"output 0 is float32\[4, 9\], but its op's fake "
                                            r"implementation says float32\[4, 8\]"):
            torch.compile(lambda t: scale_rows(t, 2.0), backend="neuron")(torch.randn(4, 8))
    finally:
        neuron_inductor.register_nki_kernel(scale_rows, scale_rows_kernel, backward=None)


def test_editing_a_kernel_recompiles_instead_of_reusing_the_cache():
    """The kernel's source digest is part of the cache key of every graph that calls it."""
    from neuron_inductor.cache import clear_memory
    x = torch.randn(8, 8)
    neuron_inductor.register_nki_kernel(scale_rows, scale_rows_kernel, backward=None)
    fn = lambda t: scale_rows(t, 3.0)  # noqa: E731
    stats.reset("compile", "fallback_ops")
    torch.compile(fn, backend="neuron")(x)
    torch._dynamo.reset()
    clear_memory()
    torch.compile(fn, backend="neuron")(x)
    assert stats.compiled()["graphs_compiled"] == 1  # same kernel: a disk hit
    neuron_inductor.register_nki_kernel(scale_rows, wrong_shape_kernel, backward=None)
    try:
        torch._dynamo.reset()
        clear_memory()
        with pytest.raises(Exception, match="fake implementation"):
            torch.compile(fn, backend="neuron")(x)
        assert stats.compiled()["graphs_compiled"] == 2  # new kernel: compiled again, not the old entry
    finally:
        neuron_inductor.register_nki_kernel(scale_rows, scale_rows_kernel, backward=None)


def test_int64_input_is_a_declared_fallback_not_a_kernel_call():
    """Kernels have no 64-bit types: the op runs its eager implementation, declared and counted."""
    @torch.library.custom_op("nki_tests::take_rows", mutates_args=())
    def take_rows(x: Tensor, idx: Tensor) -> Tensor:
        return x[idx]

    @take_rows.register_fake
    def _(x, idx):
        return x.new_empty(idx.shape[0], x.shape[1])

    @nki.jit
    def take_rows_kernel(x, idx):
        N, F = x.shape
        out = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.shared_hbm)
        return out

    neuron_inductor.register_nki_kernel(take_rows, take_rows_kernel, backward=None)
    x, idx = torch.randn(5, 3), torch.tensor([4, 0, 2])
    stats.reset("compile", "fallback_ops")
    got = torch.compile(lambda a, b: take_rows(a, b) * 2, backend="neuron")(x, idx)
    torch.testing.assert_close(got, x[idx] * 2)
    assert stats.compiled()["user_kernel_calls"] == 0
    assert stats.fallback_ops()["nki_tests.take_rows.default"] == 1


# ---------------------------------------------------------------------- registration errors

GLOBAL_LIST = [1, 2]


def test_registration_refuses_what_cannot_run_as_a_kernel():
    @torch.library.custom_op("nki_tests::ident", mutates_args=())
    def ident(x: Tensor) -> Tensor:
        return x.clone()

    @nki.jit
    def reads_a_list(x):
        n = GLOBAL_LIST
        return x

    @nki.jit
    def uses_torch_attr(x):
        y = x.float()
        return y

    @nki.jit
    def two_params(x, y):
        return x

    with pytest.raises(UserKernelError, match="reads module-level 'GLOBAL_LIST' \\(list\\)"):
        neuron_inductor.register_nki_kernel(ident, reads_a_list)
    with pytest.raises(KernelCheckError, match="x.float"):
        neuron_inductor.register_nki_kernel(ident, uses_torch_attr)
    with pytest.raises(UserKernelError, match="takes 2 parameters"):
        neuron_inductor.register_nki_kernel(ident, two_params)
    with pytest.raises(UserKernelError, match="not a torch.library custom op"):
        neuron_inductor.register_nki_kernel(F.gelu, two_params)
    assert "nki_tests::ident" not in registered()  # a refused kernel leaves nothing behind


# ------------------------------------------------------------------------------ the ViT model

@pytest.mark.slow
def test_vit_with_the_mlp_kernel_matches_eager(ex):
    """transformers' ViTModel (tiny config, 2 layers) with every ViTMLP replaced by the kernel:
    last hidden state and every parameter gradient equal eager's; the forward calls the kernel
    once per layer, the backward is compiled from the reference's gradient, nothing falls back
    (the patch-embedding convolution is a matmul too)."""
    pytest.importorskip("transformers")
    import copy
    eager = ex.tiny_vit(2)
    model = neuron_inductor.use_nki_layers(copy.deepcopy(eager), {"ViTMLP": ex.NkiViTMLP})
    stats.reset("compile", "fallback_ops")
    compiled = torch.compile(model, backend="neuron", options={"fallback": "error"})
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    want = eager(pixel_values=pixels).last_hidden_state
    got = compiled(pixel_values=pixels).last_hidden_state
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    want.square().mean().backward()
    got.square().mean().backward()
    for (name, p), q in zip(eager.named_parameters(), model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert stats.compiled()["graphs_compiled"] == 2  # one forward, one backward
    assert stats.compiled()["user_kernel_calls"] == 2  # one per layer, all in the forward
    assert not stats.fallback_ops() and stats.compiled()["graph_fallbacks"] == 0


def test_only_hand_written_kernels_may_read_shapes():
    """Generated kernels have every size baked in; a user kernel sizes its loops from ``x.shape``."""
    from neuron_inductor.codegen.check import check_kernel_source
    from neuron_inductor.codegen.kernel import HEADER
    src = f"{HEADER}\n\n\n@nki.jit\ndef k(x):\n    n, d = x.shape\n    return x\n"
    check_kernel_source(src, user_kernels=["k"])
    with pytest.raises(KernelCheckError, match="attribute access"):
        check_kernel_source(src)
