"""Rotary embeddings as ``neuron_inductor::rotary`` kernels (``graph.rotary_pattern``,
``lowering.rotary``): the match, the kernels it gives, their traffic and their numbers vs eager.

Shapes are ragged on purpose (300 and 130 tokens: several 128-row tiles with a short last one), fp32
and bf16, q/k/v projected from one QKV GEMM (whole-head DMA rows) and separate contiguous tensors
(one head per row), tables per batch element (Hugging Face's ``[B, S, D]`` cos/sin).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from neuron_inductor.config import get_config
from neuron_inductor.costmodel import estimate_program
from neuron_inductor.graph.passes import run_passes
from neuron_inductor.lowering.rotary import ROTARY, ROTARY_CAT
from neuron_inductor.pipeline import partition_and_lower
from neuron_inductor.target import get_target

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lowering"))
from _ops import check_cases, randn  # noqa: E402

aten = torch.ops.aten


def rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., :x.shape[-1] // 2]), -1)


def rot(x, cos, sin):
    return x * cos + rotate_half(x) * sin


def rot_chunk(x, cos, sin):
    """The benchmark's form (``x.chunk(2, -1)``): its gradient is a ``cat``, not slice scatters."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def qkv_block(x, w, cos, sin, rotary=rot_chunk):
    """The decoder layer's attention input: one QKV projection, q and k rotated."""
    B, S, _ = x.shape
    D = cos.shape[-1]
    q, k, v = (x @ w.t()).view(B, S, 3, -1, D).permute(2, 0, 3, 1, 4)
    return rotary(q, cos, sin), rotary(k, cos, sin), v * 2


def qkv_block_sliced(x, w, cos, sin):
    return qkv_block(x, w, cos, sin, rot)


def _joint_targets(fn, args) -> tuple[list, list]:
    """Node targets of the forward and backward graphs after the passes (AOTAutograd's split)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    from neuron_inductor.graph.decompositions import decomposition_table
    graphs = []

    def comp(gm, _):
        graphs.append([n.target for n in run_passes(gm).graph.nodes])
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    out = torch.compile(fn, backend=aot_autograd(fw_compiler=comp, bw_compiler=comp,
                                                 decompositions=decomposition_table()))(*args)
    sum(o.sum() for o in out).backward()
    return graphs[0], graphs[1]


def tables(S: int, D: int, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary cos/sin tables as models build them (angles of S positions)."""
    inv = 1.0 / (10000 ** (torch.arange(0, D, 2).float() / D))
    t = torch.arange(S).float()[:, None] * inv[None, :]
    emb = torch.cat((t, t), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def test_qkv_rotary_forward_and_backward_are_kernels():
    x = torch.randn(1, 130, 256, requires_grad=True)
    w = torch.randn(768, 256, requires_grad=True)
    fw, bw = _joint_targets(qkv_block, (x, w, torch.randn(130, 128), torch.randn(130, 128)))
    assert fw.count(ROTARY) == 1 and aten.cat.default not in fw          # q and k in one kernel
    # the backward's rotated dq, dk and dv are written straight into the dqkv concatenation
    assert bw.count(ROTARY_CAT) == 1 and aten.cat.default not in bw and ROTARY not in bw
    # rotate_half by slicing (Hugging Face's form): the gradient's slice scatters match too
    fw, bw = _joint_targets(qkv_block_sliced, (x, w, torch.randn(130, 128), torch.randn(130, 128)))
    assert fw.count(ROTARY) == 1 and bw.count(ROTARY_CAT) == 1 and aten.slice_scatter.default not in bw


@pytest.mark.parametrize("fn", [qkv_block, qkv_block_sliced], ids=["chunk", "sliced"])
def test_qkv_rotary_matches_eager_fp32(fn):
    x = randn((2, 300, 256), seed=1)
    w = randn((768, 256), seed=2) * 0.05
    check_cases(fn, [(x, w) + tables(300, 128, torch.float32)], grad=True, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rotary", [rot_chunk, rot], ids=["chunk", "sliced"])
def test_qkv_views_rotary_matches_eager(dtype, rotary):
    # q/k/v as views of one [tokens, 3 x heads x D] tensor (what the QKV projection gives): the
    # forward reads whole-head rows, the backward writes rotated dq, dk and the passed-through dv
    # into one dqkv (rotary_cat). bf16 compares the rotary's own gradients: the weight gradient of
    # a bf16 QKV GEMM over 600 tokens differs from eager's rounding with or without these kernels.
    def fn(qkv, cos, sin):
        q, k, v = qkv.view(2, 300, 3, -1, 128).permute(2, 0, 3, 1, 4)
        return rotary(q, cos, sin), rotary(k, cos, sin), v * 2
    check_cases(fn, [(randn((2, 300, 768), dtype, seed=3),) + tables(300, 128, dtype)], grad=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_per_batch_tables_and_separate_tensors_match_eager(dtype):
    # Hugging Face's cos/sin [B, S, D] unsqueezed over heads: the tables vary along batch too (an
    # outer axis of the kernel); q, k contiguous [B, H, S, D] (one head per DMA row)
    def fn(q, k, cos, sin):
        c, s = cos.unsqueeze(1), sin.unsqueeze(1)
        return rot(q, c, s), rot(k, c, s)
    cases = [tuple(randn(s, dtype, seed=10 + i) for i, s in
                   enumerate([(2, 3, 300, 64), (2, 3, 300, 64), (2, 300, 64), (2, 300, 64)]))]
    check_cases(fn, cases, grad=True)


def test_unmatched_forms_stay_elementwise():
    # a rotate_half of another tensor's halves, or odd pieces, is not a rotary: left to cat_select
    def fn(x, y, cos, sin):
        return x * cos + rotate_half(y) * sin
    gm = make_fx(fn, tracing_mode="fake")(*[torch.empty(s) for s in
                                             [(1, 2, 8, 64), (1, 2, 8, 64), (8, 64), (8, 64)]])
    run_passes(gm)
    assert ROTARY not in [n.target for n in gm.graph.nodes]


def test_rotary_traffic_whole_head_rows():
    # q and k of a 2048-token, 32-head QKV output: each read once, written once, the tables once per
    # row tile (68 MB; the elementwise select read q/k three times and the tables per head: 168 MB),
    # and no descriptor under 2 KiB per partition (the select moved 128-byte rows)
    def fn(qkv, cos, sin):
        q, k, v = qkv.view(1, 2048, 3, 32, 128).permute(2, 0, 3, 1, 4)
        return rot(q, cos, sin), rot(k, cos, sin)
    args = [torch.empty(s, dtype=torch.bfloat16, device="meta") for s in [(2048, 12288), (2048, 128),
                                                                          (2048, 128)]]
    gm = make_fx(fn, tracing_mode="fake")(*args)
    lg = partition_and_lower(run_passes(gm), get_config().replace(target="trn2", cache=False), "rot")
    (k,) = lg.program.kernels
    c = estimate_program([k], get_target("trn2")).kernels[0]
    assert c.hbm_bytes <= 70e6
    assert c.small_dma_share < 0.05
