"""Attention with masked rows, forward and backward against eager (lowering/attention/ and the math
form in graph/decompositions.py).

Eager SDPA on CPU runs torch's flash kernel for every 4-D case here (also with a mask, with
``is_causal`` next to a mask, and with ``enable_gqa``). Its semantics, which ours must equal: a
masked-out score (bool False, -inf, causal) takes no part; a query row with every key masked out
(left padding: a padding query sees only padding keys) gives output 0, logsumexp 0 and zero
gradients; finite masks (``finfo.min``) are plain arithmetic, so a row masked only by them is a
uniform average of V. The padded rows' values matter: with left padding the last padding position
predicts the first real token, so its (zero) attention output reaches the loss.

Lengths 77 and 300 are not multiples of 128 and span up to three 128-row tiles; Sq != Sk is covered.
bf16 uses tests/_compare.py's bf16 tolerance (2 ulps relative + 1e-2 absolute), and where that fails,
``check_cases`` requires our value to be no further from the fp32 result than eager bf16 is: eager
rounds P to bf16 before P @ V, our kernel and math form keep different intermediates in fp32.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from _ops import check_cases

from neuron_inductor.lowering.attention import common as C
from neuron_inductor.lowering.attention import forward as A

F32, BF16 = torch.float32, torch.bfloat16


def _qkv(b, h, sq, d, dtype=F32, sk=None, hk=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    sk, hk = sk or sq, hk or h
    q = torch.randn(b, h, sq, d, generator=g)
    k, v = (torch.randn(b, hk, sk, d, generator=g) for _ in range(2))
    return [x.to(dtype) for x in (q, k, v)]


def _padding(b: int, s: int, left: list[int]) -> torch.Tensor:
    """[B, S] keep-mask: row i has ``left[i]`` padding positions at its start."""
    keep = torch.ones(b, s, dtype=torch.bool)
    for i, n in enumerate(left):
        keep[i, :n] = False
    return keep


def _causal_padded(b: int, sq: int, sk: int, left: list[int]) -> torch.Tensor:
    """What transformers' sdpa_mask builds for a left-padded batch: [B, 1, Sq, Sk] bool, causal and
    padding (queries aligned to the last keys, so Sq < Sk is a cached prefix)."""
    causal = torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)
    return causal[None, None] & _padding(b, sk, left)[:, None, None, :]


def _additive(mask: torch.Tensor, fill: float, dtype=F32) -> torch.Tensor:
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, fill)


def _nograd(m: torch.Tensor) -> torch.Tensor:
    """check_cases makes every float input require grad; a mask that requires grad sends eager to
    its math path, so masks are detached: eager and we then run torch's CPU flash op."""
    return m.detach() if m.is_floating_point() else m


def _sdpa(**kw):
    def fn(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=_nograd(m), **kw)
    return fn


def _with_mask(cases, masks):
    return [list(c) + [m] for c, m in zip(cases, masks)]


def _assert_dead_rows_zero(q, k, v, mask, rows):
    """The premise of these tests: eager gives exact zeros on rows without keys (no NaN)."""
    if mask.dtype == torch.bool:
        mask = _additive(mask, float("-inf"), q.dtype)
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask)
    assert torch.equal(out[rows], torch.zeros_like(out[rows])) and torch.equal(lse[rows], torch.zeros_like(lse[rows]))


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("kind", ["bool", "neg_inf", "finfo_min"])
def test_left_padded_causal(kind, dtype):
    """HF's left-padded causal mask: rows 0..n-1 of a padded sequence have no key at all (bool /
    -inf: output 0, zero gradients; finfo.min: uniform, as eager). One tile, several tiles, Sq != Sk."""
    shapes = [(2, 2, 77, 77, 16, [0, 30]), (2, 2, 300, 300, 32, [0, 200]), (2, 1, 77, 300, 16, [250, 5])]
    cases, masks = [], []
    for j, (b, h, sq, sk, d, left) in enumerate(shapes):
        cases.append(_qkv(b, h, sq, d, dtype, sk=sk, seed=j))
        m = _causal_padded(b, sq, sk, left)
        masks.append(m if kind == "bool" else
                     _additive(m, float("-inf") if kind == "neg_inf" else torch.finfo(dtype).min, dtype))
    if kind != "finfo_min":
        _assert_dead_rows_zero(*cases[0][:3], masks[0], (1, slice(None), slice(0, 30)))
    # finfo.min rows: eager's backward takes P = 1 on every key (its logsumexp rounds to the masked
    # score), so their dQ is an unnormalised sum of ~300 terms up to ~75 in size; eager bf16 is itself
    # 0.26 off fp32 there, ours 0.26 too, in different elements: bf16 gets an absolute 0.3
    low_atol = 0.3 if kind == "finfo_min" else None
    check_cases(_sdpa(), _with_mask(cases, masks), grad=True, atol=1e-4 if dtype == F32 else None,
                low_atol=low_atol)


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_key_only_and_broadcast_masks(dtype):
    """Masks broadcast over batch, heads and queries: [B, 1, 1, Sk] padding (a batch entry whose
    keys are all padding: every row dead), [Sq, Sk] and [1, H, Sq, Sk] float masks, a full
    [B, H, Sq, Sk] bool mask with random dead rows."""
    g = torch.Generator().manual_seed(3)
    key_only = _padding(3, 130, [0, 50, 130])[:, None, None, :]
    two_d = torch.randn(77, 300, generator=g).to(dtype)
    two_d[5] = float("-inf")
    per_head = _additive(torch.rand(1, 2, 130, 130, generator=g) > 0.5, torch.finfo(dtype).min, dtype)
    full = torch.rand(2, 2, 300, 77, generator=g) > 0.4
    full[:, :, 100:140] = False
    full[1, 0, 7] = False
    cases = [_qkv(3, 2, 130, 16, dtype), _qkv(1, 2, 77, 16, dtype, sk=300, seed=1),
             _qkv(2, 2, 130, 16, dtype, seed=2), _qkv(2, 2, 300, 16, dtype, sk=77, seed=4)]
    check_cases(_sdpa(), _with_mask(cases, [key_only, two_d, per_head, full]), grad=True,
                atol=1e-4 if dtype == F32 else None)


def _eager_refuses(fn, args) -> bool:
    """Whether the running torch rejects the call in eager (torch >= 2.14: an explicit ``attn_mask``
    together with ``is_causal=True``); decided by behaviour, not by version."""
    try:
        fn(*args)
    except RuntimeError as e:
        return "is_causal" in str(e)
    return False


@pytest.mark.smoke
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_causal_flag_with_padding_and_scale(dtype):
    """``is_causal=True`` next to a padding mask, an explicit scale, dropout_p=0: torch < 2.14 takes
    both (its CPU flash kernel) and we must equal it; torch >= 2.14 refuses the pair, and so must the
    compiled call (the same program, the running torch's semantics)."""
    mask = _padding(2, 300, [0, 140])[:, None, None, :]
    fn = lambda q, k, v, m: F.scaled_dot_product_attention(  # noqa: E731
        q, k, v, attn_mask=m, is_causal=True, dropout_p=0.0, scale=0.3)
    case = _qkv(2, 2, 300, 16, dtype) + [mask]
    if _eager_refuses(fn, case):
        torch._dynamo.reset()
        with pytest.raises(RuntimeError, match="is_causal|fake tensor"):
            torch.compile(fn, backend="neuron")(*case)
        return
    check_cases(fn, [case], grad=True, atol=1e-4 if dtype == F32 else None)


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_packed_documents(dtype):
    """Block-diagonal causal mask of packed sequences (documents of 50, 100, 90 and 60 tokens in a
    300-token row) and padding at the end of the row (dead: a key-only padding AND'ed in)."""
    doc = torch.repeat_interleave(torch.arange(5), torch.tensor([50, 100, 90, 40, 20]))
    same = doc[:, None] == doc[None, :]
    causal = torch.ones(300, 300, dtype=torch.bool).tril()
    keep = same & causal & (doc != 4)[None, :]            # document 4 is padding: its keys are masked
    mask = keep[None, None].expand(2, 1, 300, 300)
    check_cases(_sdpa(), [_qkv(2, 2, 300, 32, dtype) + [mask]], grad=True, atol=1e-4 if dtype == F32 else None)


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_grouped_query_heads(dtype):
    """GQA / MQA with padding masks: ``enable_gqa`` (K/V with fewer heads reach the flash op) and
    transformers' ``repeat_kv`` (expand + reshape before SDPA)."""
    def fn(q, k, v, m, q2, k2, v2, m2):
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)
        b, hk, s, d = k2.shape
        rep = q2.shape[1] // hk
        k2, v2 = (x[:, :, None].expand(b, hk, rep, s, d).reshape(b, hk * rep, s, d) for x in (k2, v2))
        return a, F.scaled_dot_product_attention(q2, k2, v2, attn_mask=m2)
    case = (_qkv(2, 4, 130, 16, dtype, hk=2) + [_causal_padded(2, 130, 130, [0, 60])]
            + _qkv(2, 4, 77, 16, dtype, hk=1, seed=1) + [_causal_padded(2, 77, 77, [20, 0])])
    check_cases(fn, [case], grad=True, atol=1e-4 if dtype == F32 else None)


@pytest.mark.parametrize("kind", ["bool", "finfo_min"])
def test_dead_rows_across_online_softmax_steps(kind, monkeypatch):
    """Several key steps per query tile: a dead row's running max stays at the masked level over the
    steps and the final output / logsumexp are still 0."""
    monkeypatch.setattr(A, "KEY_STEP", 128)
    m = _causal_padded(2, 300, 300, [0, 170])
    mask = m if kind == "bool" else _additive(m, torch.finfo(F32).min)
    cases = [_qkv(2, 2, 300, 16) + [mask], _qkv(2, 2, 300, 16, BF16, seed=1) + [mask if kind == "bool"
                                                                             else mask.to(BF16)]]
    check_cases(_sdpa(), cases, grad=True, atol=1e-4)


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_math_form_masked_rows(dtype):
    """Cases the kernels do not take (head dim 160 -> math with the flash op's semantics; 3-D inputs,
    and a float mask that itself requires grad -> eager's own math path with _safe_softmax, which
    also gives dead rows output 0 and zero gradients) with left padding."""
    def fn(q, k, v, m, q3, m3, q4, fm):
        return (F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                F.scaled_dot_product_attention(q3, q3, q3, attn_mask=m3),
                F.scaled_dot_product_attention(q4, q4, q4, attn_mask=fm))
    m = _causal_padded(2, 77, 77, [0, 30])
    q3 = torch.randn(2, 77, 16, generator=torch.Generator().manual_seed(9)).to(dtype)
    fm = _additive(m, float("-inf"), dtype)
    check_cases(fn, [_qkv(2, 1, 77, 160, dtype) + [m, q3, m[:, 0], _qkv(2, 2, 77, 16, dtype, seed=5)[0], fm]],
                grad=True, atol=1e-4 if dtype == F32 else None)


def test_masked_bias_constants():
    """The sentinels keep hard-masked, finfo.min-masked and real scores apart in fp32 (and stay
    finite after the causal and mask parts add up, times a scale up to 100)."""
    assert C.SOFT * 10 < -C.DEAD < C.HARD
    assert 2 * C.HARD * 100 < torch.finfo(F32).max
    assert torch.finfo(BF16).min > C.NEG_F32_MAX   # a bf16 finfo.min mask is finite, not -inf
