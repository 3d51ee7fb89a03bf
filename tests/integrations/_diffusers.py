"""Tiny Diffusers models from small configs (random weights) shared by the single-process and the
torchrun tests."""
from __future__ import annotations

import torch


def tiny_dit(seed: int = 0):
    """A 2-block SD3 MMDiT: hidden 32, 4 heads of 8, 8x8 latents in 2x2 patches."""
    from diffusers import SD3Transformer2DModel
    torch.manual_seed(seed)
    return SD3Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=8,
        num_attention_heads=4, joint_attention_dim=32, caption_projection_dim=32,
        pooled_projection_dim=16, pos_embed_max_size=8)


def tiny_unet(seed: int = 0):
    """A 2-level UNet: stride-2 downsampler, nearest upsampler, cross attention, group norm."""
    from diffusers import UNet2DConditionModel
    torch.manual_seed(seed)
    return UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(16, 32),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), mid_block_type=None,
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8)


def dit_inputs(g: torch.Generator) -> dict:
    return dict(encoder_hidden_states=torch.randn(2, 5, 32, generator=g),
                pooled_projections=torch.randn(2, 16, generator=g))


def unet_inputs(g: torch.Generator) -> dict:
    return dict(encoder_hidden_states=torch.randn(2, 5, 32, generator=g))
