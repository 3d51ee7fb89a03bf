"""trn1 (NeuronCore-v2): its TensorE transpose "is not bit-accurate if the input data contains
NaN/Inf" (aws-neuron-sdk ``nki/api/nki/isa/__init__.py`` nc_transpose), and the simulator refuses
one (rule ``transpose-nonfinite-v2``). Masks (-inf, ``masked_fill``), dropout and user infinities
on trn1 must therefore reach no TensorE transpose, and still equal eager.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from _ops import check_cases

from test_attention_masks import _additive, _causal_padded, _qkv, _sdpa, _with_mask

F32, BF16 = torch.float32, torch.bfloat16


def test_neg_inf_masked_attention_on_trn1():
    for dtype in (F32, BF16):
        cases, masks = [], []
        for j, (b, h, sq, sk, d, left) in enumerate([(2, 2, 77, 77, 16, [0, 30]), (1, 2, 300, 300, 32, [200])]):
            cases.append(_qkv(b, h, sq, d, dtype, sk=sk, seed=j))
            masks.append(_additive(_causal_padded(b, sq, sk, left), float("-inf"), dtype))
        check_cases(_sdpa(), _with_mask(cases, masks), grad=True, atol=1e-4 if dtype == F32 else None,
                    target="trn1")


def test_masked_fill_softmax_matmul_on_trn1():
    g = torch.Generator().manual_seed(0)
    s, v = torch.randn(2, 130, 130, generator=g), torch.randn(2, 130, 40, generator=g)
    keep = torch.ones(130, 130, dtype=torch.bool).tril()
    check_cases(lambda s, v: s.masked_fill(~keep, float("-inf")).softmax(-1) @ v, [(s, v)], grad=True,
                target="trn1")


def test_user_infinities_through_matmul_and_reductions_on_trn1():
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(130, 64, generator=g), torch.randn(64, 48, generator=g)
    x[3, 5], x[100, 0] = float("inf"), float("-inf")
    check_cases(lambda x, w: (x @ w, x.amax(0), x.T.sum(-1)), [(x, w)], target="trn1")


def test_dropout_on_trn1():
    x = torch.randn(4, 130, 96, generator=torch.Generator().manual_seed(2))
    torch.manual_seed(0)
    check_cases(lambda x: F.dropout(x, 0.0, training=True) + x.softmax(-1), [(x,)], grad=True, target="trn1")
