"""A hand-written NKI kernel as a first-class op: a ViT whose MLP blocks run one fused kernel each.

    python examples/nki_vit_mlp.py            # ViT (hidden 64, 4 layers) fwd + bwd, 3 steps
    python examples/nki_vit_mlp.py --smoke    # 1 layer, 1 step (also: NEURON_INDUCTOR_SMOKE=1)

Three pieces, all user code:

1. ``vit_mlp_kernel``: an ``@nki.jit`` kernel in the current NKI API (destination-first ``nisa``
   calls) computing ``gelu(x @ w1.T + b1) @ w2.T + b2`` for all rows in one pass: both matmuls on
   TensorE with the hidden activations kept transposed in SBUF (so the bias is a per-partition
   column and GELU is fused into the PSUM eviction), ragged row tiles of 128.
2. ``vit_mlp``: a ``torch.library`` custom op whose eager body is the reference (what runs outside
   ``torch.compile`` and what autograd differentiates), bound to the kernel with
   ``neuron_inductor.register_nki_kernel``.
3. ``NkiViTMLP``: a kernel layer whose ``forward`` replaces ``ViTMLP.forward`` (the way the Hugging
   Face ``kernels`` package maps a layer to a Hub kernel for a device); ``use_nki_layers`` applies it.

Then ``torch.compile(model, backend="neuron")`` calls the kernel inside the compiled forward (run by
the built-in simulator here, by the NKI toolchain on a Trainium) and the backward is compiled from
the reference's gradient. The script checks outputs and gradients against eager.
"""
import torch
import torch.nn.functional as F
from _proof import report, smoke
from torch import Tensor

import neuron_inductor
from neuron_inductor.runtime.nki import nki, nl, nisa

SMOKE = smoke()
P = 128  # partitions: rows per tile


@nki.jit
def vit_mlp_kernel(x, w1, b1, w2, b2):
    """y = gelu(x @ w1.T + b1) @ w2.T + b2 for x [N, D], w1 [I, D], b1 [I], w2 [D, I], b2 [D].

    D <= 128 (one contraction tile), I any size (blocks of 128 accumulated in PSUM), N any size
    (row tiles of 128, the last one ragged). Transposed layout: x^T [D, n] is the moving operand,
    so h^T = w1 @ x^T lands in PSUM with the hidden axis on partitions, where b1 is a column and
    GELU is applied while evicting to SBUF; y^T = w2 @ h^T accumulates over the hidden blocks.
    """
    N, D = x.shape
    I, _ = w1.shape
    NI = (I + P - 1) // P
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)

    # weights once, transposed on TensorE: w1t = w1.T [D, I]; block k of w2t = w2[:, k].T [128, D]
    w1t = nl.ndarray((D, NI * P), dtype=nl.float32, buffer=nl.sbuf)
    w2t = nl.ndarray((P, NI * D), dtype=nl.float32, buffer=nl.sbuf)
    b1c = nl.ndarray((P, NI), dtype=nl.float32, buffer=nl.sbuf)
    b2c = nl.ndarray((D, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=b2c[0:D, 0:1], src=b2.ap(pattern=[[1, D], [1, 1]], offset=0))
    for k in nl.affine_range(NI):
        ik = min(P, I - k * P)
        w1_blk = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=w1_blk[0:ik, 0:D], src=w1[k * P:k * P + ik, 0:D])
        w1_ps = nl.ndarray((D, P), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=w1_ps[0:D, 0:ik], data=w1_blk[0:ik, 0:D], engine=nisa.tensor_engine)
        nisa.tensor_copy(dst=w1t[0:D, k * P:k * P + ik], src=w1_ps[0:D, 0:ik], engine=nisa.vector_engine)
        w2_blk = nl.ndarray((D, P), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=w2_blk[0:D, 0:ik], src=w2[0:D, k * P:k * P + ik])
        w2_ps = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=w2_ps[0:ik, 0:D], data=w2_blk[0:D, 0:ik], engine=nisa.tensor_engine)
        nisa.tensor_copy(dst=w2t[0:ik, k * D:k * D + D], src=w2_ps[0:ik, 0:D], engine=nisa.vector_engine)
        nisa.dma_copy(dst=b1c[0:ik, k:k + 1], src=b1.ap(pattern=[[1, ik], [1, 1]], offset=k * P))

    for r in nl.affine_range((N + P - 1) // P):
        n = min(P, N - r * P)
        x_in = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_in[0:n, 0:D], src=x[r * P:r * P + n, 0:D])
        xt_ps = nl.ndarray((D, P), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=xt_ps[0:D, 0:n], data=x_in[0:n, 0:D], engine=nisa.tensor_engine)
        xt = nl.ndarray((D, P), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=xt[0:D, 0:n], src=xt_ps[0:D, 0:n], engine=nisa.vector_engine)
        yt_ps = nl.ndarray((D, P), dtype=nl.float32, buffer=nl.psum)
        for k in nl.sequential_range(NI):
            ik = min(P, I - k * P)
            h_ps = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=h_ps[0:ik, 0:n], stationary=w1t[0:D, k * P:k * P + ik],
                           moving=xt[0:D, 0:n], accumulate=False)
            ht = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=ht[0:ik, 0:n], op=nl.gelu, data=h_ps[0:ik, 0:n], bias=b1c[0:ik, k:k + 1])
            nisa.nc_matmul(dst=yt_ps[0:D, 0:n], stationary=w2t[0:ik, k * D:k * D + D],
                           moving=ht[0:ik, 0:n], accumulate=k > 0)
        yt = nl.ndarray((D, P), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=yt[0:D, 0:n], op=nl.copy, data=yt_ps[0:D, 0:n], bias=b2c[0:D, 0:1])
        y_ps = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_transpose(dst=y_ps[0:n, 0:D], data=yt[0:D, 0:n], engine=nisa.tensor_engine)
        y = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=y[0:n, 0:D], src=y_ps[0:n, 0:D], engine=nisa.vector_engine)
        nisa.dma_copy(dst=out[r * P:r * P + n, 0:D], src=y[0:n, 0:D])
    return out


@torch.library.custom_op("nki_examples::vit_mlp", mutates_args=())
def vit_mlp(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
    """Reference: what runs eagerly, and what autograd differentiates."""
    return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)


@vit_mlp.register_fake
def _(x, w1, b1, w2, b2):
    return x.new_empty(x.shape[0], w2.shape[0])


neuron_inductor.register_nki_kernel(vit_mlp, vit_mlp_kernel)


class NkiViTMLP(torch.nn.Module):
    """Kernel layer for transformers' ``ViTMLP`` (uses the replaced module's fc1 / fc2)."""

    def forward(self, hidden_states: Tensor) -> Tensor:
        shape = hidden_states.shape
        y = vit_mlp(hidden_states.reshape(-1, shape[-1]), self.fc1.weight, self.fc1.bias,
                    self.fc2.weight, self.fc2.bias)
        return y.reshape(shape)


def tiny_vit(layers: int):
    from transformers import ViTConfig, ViTModel
    torch.manual_seed(0)
    cfg = ViTConfig(hidden_size=64, num_hidden_layers=layers, num_attention_heads=4,
                    intermediate_size=256, image_size=32, patch_size=8, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)
    return ViTModel(cfg, add_pooling_layer=False)


def main() -> None:
    import copy

    from neuron_inductor import stats

    eager = tiny_vit(1 if SMOKE else 4)
    model = neuron_inductor.use_nki_layers(copy.deepcopy(eager), {"ViTMLP": NkiViTMLP})
    compiled = torch.compile(model, backend="neuron", options={"fallback": "error"})
    g = torch.Generator().manual_seed(1)
    for step in range(1 if SMOKE else 3):
        pixels = torch.randn(2, 3, 32, 32, generator=g)
        want = eager(pixel_values=pixels).last_hidden_state
        got = compiled(pixel_values=pixels).last_hidden_state
        want.square().mean().backward()
        got.square().mean().backward()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        for (name, p), q in zip(eager.named_parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)
        print(f"step {step}: max |out - eager| = {(got - want).abs().max().item():.2e}")
    print(f"hand-written kernel calls compiled: {stats.compiled()['user_kernel_calls']}")
    report()
    print("matches eager: forward and every gradient")


if __name__ == "__main__":
    main()
