"""TRL packing with static shapes: keep the document boundaries, drop the varlen metadata.

TRL's best-fit-decreasing packing (``packing=True``, ``packing_strategy="bfd"`` or ``"bfd_split"``)
is padding-free: each batch is one row of concatenated documents whose ``position_ids`` restart at 0
for every document, padded to ``pad_to_multiple_of``. transformers builds a block-diagonal causal
mask from those position ids for SDPA/eager attention (``find_packed_sequence_indices``), so
attention never crosses a document boundary, and the row's length is a multiple of 128: few shapes.

The collator also returns FlashAttention's varlen metadata — ``cu_seq_lens_q/k`` (one entry per
document: a new tensor shape almost every batch), ``max_length_q/k`` (Python ints Dynamo specialises
on) and ``seq_idx``. Only FlashAttention kernels read them; passed to a model that attends with SDPA
they change nothing but make every batch a new graph. :class:`StaticPackingCollator` removes them.
"""
from __future__ import annotations

from typing import Any, Callable

__all__ = ["VARLEN_KEYS", "StaticPackingCollator", "static_shape_packing"]

#: batch entries only FlashAttention's varlen kernels use (the mask comes from ``position_ids``)
VARLEN_KEYS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx")


class StaticPackingCollator:
    """Wraps a (TRL) collator and drops :data:`VARLEN_KEYS` from every batch."""

    def __init__(self, inner: Callable[[list], dict]) -> None:
        self.inner = inner

    def __call__(self, features: list) -> dict:
        batch = self.inner(features)
        for key in VARLEN_KEYS:
            batch.pop(key, None)
        return batch

    def __getattr__(self, name: str) -> Any:  # TRL reads e.g. ``padding_free`` off its collator
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def static_shape_packing(trainer: Any) -> Any:
    """Install :class:`StaticPackingCollator` on a TRL ``SFTTrainer``; returns the trainer.

    Refused for models attending with FlashAttention, which need the varlen metadata.
    """
    impl = getattr(getattr(trainer.model, "config", None), "_attn_implementation", None) or ""
    if "flash" in impl:
        raise ValueError(f"the model attends with {impl}, which reads the varlen metadata this "
                         "collator drops; use attn_implementation='sdpa' (or 'eager')")
    if not isinstance(trainer.data_collator, StaticPackingCollator):
        trainer.data_collator = StaticPackingCollator(trainer.data_collator)
    return trainer
