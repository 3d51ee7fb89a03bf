"""Pad sequence lengths to 128-token buckets so a training run sees a handful of shapes.

Trainium compiles per static shape. Padding every batch's length up to a multiple of 128 bounds the
number of distinct shapes to ``ceil(max_len / 128)``; the shape-keyed cache then compiles each of
those once, ever. Padding belongs in the data pipeline, where the attention mask and the ignored
label id make it semantically neutral; nothing in the compiler pads silently.

Sizing Dynamo: with its defaults (automatic dynamic shapes) Dynamo captures the first length
statically and, at the second distinct length, one symbolic graph that the neuron backend specialises
per concrete bucket through the cache — two Dynamo graphs in all, so ``recompile_limit`` needs no
change. Only with ``dynamic=False`` (or automatic dynamic turned off) is every bucket its own Dynamo
graph: then raise ``torch._dynamo.config.recompile_limit`` to the bucket count,
:func:`recommended_recompile_limit` (8 for 1024 tokens in 128-token buckets, 16 for 2048).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import torch

IGNORE_INDEX = -100

__all__ = ["bucket", "pad_to_bucket", "BucketingCollator", "recommended_recompile_limit",
           "IGNORE_INDEX"]


def bucket(n: int, multiple: int = 128, max_len: int | None = None) -> int:
    """The smallest multiple of ``multiple`` that holds ``n`` (at least one bucket), capped at ``max_len``.

    ``max_len`` caps the result: a sequence longer than ``max_len`` is a data error (it would be a
    new, unbounded shape), so it raises instead of being silently truncated.
    """
    if multiple <= 0:
        raise ValueError(f"multiple must be positive, got {multiple}")
    if n < 0:
        raise ValueError(f"length must be non-negative, got {n}")
    if max_len is not None and n > max_len:
        raise ValueError(f"length {n} exceeds max_len {max_len}; truncate in the data pipeline")
    b = max(1, math.ceil(n / multiple)) * multiple
    return min(b, max_len) if max_len is not None else b


def recommended_recompile_limit(max_len: int, multiple: int = 128, graphs_per_bucket: int = 1) -> int:
    """How high Dynamo's ``recompile_limit`` must be so every bucket gets compiled, not fall back."""
    return math.ceil(max_len / multiple) * graphs_per_bucket


def pad_to_bucket(tensor: torch.Tensor, dim: int, multiple: int = 128, value: float | int = 0,
                  max_len: int | None = None) -> torch.Tensor:
    """Right-pad ``tensor`` along ``dim`` with ``value`` to ``bucket(size)``; unchanged if already there."""
    dim = dim % tensor.dim()
    n = tensor.shape[dim]
    target = bucket(n, multiple, max_len)
    if target == n:
        return tensor
    pad_shape = list(tensor.shape)
    pad_shape[dim] = target - n
    pad = torch.full(pad_shape, value, dtype=tensor.dtype, device=tensor.device)
    return torch.cat([tensor, pad], dim=dim)


class BucketingCollator:
    """Wrap a Hugging Face-style collator so every batch's sequence length is a bucket.

    The wrapped collator pads to the longest example; we then right-pad ``input_ids`` with the pad
    id, ``attention_mask`` (and ``token_type_ids``) with 0 and ``labels`` with -100, so the padding is
    masked out of attention and ignored by the loss. Right padding keeps the real tokens at the
    start, which causal LM training expects. Other 2-D per-token fields (same length as
    ``input_ids``) are padded with 0.
    """

    def __init__(self, collator: Callable[[list], Mapping[str, Any]] | None = None, multiple: int = 128,
                 max_len: int | None = None, pad_token_id: int = 0,
                 label_pad_id: int = IGNORE_INDEX) -> None:
        self.collator = collator
        self.multiple = multiple
        self.max_len = max_len
        self.pad_token_id = pad_token_id
        self.label_pad_id = label_pad_id
        tok = getattr(collator, "tokenizer", None)
        if tok is not None and getattr(tok, "padding_side", "right") == "left":
            raise ValueError("BucketingCollator pads on the right; the tokenizer pads on the left "
                             "(set tokenizer.padding_side = 'right')")

    def _pad_value(self, name: str) -> int:
        if name == "input_ids":
            return self.pad_token_id
        if name == "labels":
            return self.label_pad_id
        return 0

    def __call__(self, features: list) -> dict[str, Any]:
        batch = dict(self.collator(features)) if self.collator is not None else _stack(features, self._pad_value)
        ids = batch.get("input_ids")
        if not isinstance(ids, torch.Tensor):
            raise ValueError("BucketingCollator needs a tensor 'input_ids' in the collated batch")
        seq = ids.shape[-1]
        out: dict[str, Any] = {}
        for name, value in batch.items():
            if isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[-1] == seq:
                out[name] = pad_to_bucket(value, -1, self.multiple, self._pad_value(name), self.max_len)
            else:
                out[name] = value
        return out


def _stack(features: list, pad_value: Callable[[str], int]) -> dict[str, Any]:
    """Default collation when none is given: pad to the longest example (right), then stack."""
    names = features[0].keys()
    longest = max(len(f["input_ids"]) for f in features)
    out: dict[str, Any] = {}
    for name in names:
        fill = pad_value(name)
        rows = []
        for f in features:
            row = torch.as_tensor(f[name])
            rows.append(torch.cat([row, row.new_full((longest - row.shape[0],), fill)]))
        out[name] = torch.stack(rows)
    return out
