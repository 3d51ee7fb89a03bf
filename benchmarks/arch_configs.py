"""The architecture matrix's tiny models: which causal LMs, with which config overrides, built how.

Every row is ``AutoConfig.for_model(arch, **COMMON, **ARCHS[arch])``: hidden 64, 2 layers, 4 heads of
16 (2 KV heads), vocab 128, random weights, no download. ``benchmarks/architectures.py`` runs the checks
on them; ``benchmarks/discover_causal_lms.py`` found the rows past the first 30.
"""
from __future__ import annotations

from typing import Any

import torch

VOCAB = 128
#: sliding-window models get this window, so training at 130 tokens and 64-token generation cross it
SLIDING_WINDOW = 32

#: shared by every tiny config; names are the transformers-standard ones (configs map them via attribute_map)
COMMON: dict[str, Any] = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, max_position_embeddings=512, pad_token_id=0, bos_token_id=1,
    eos_token_id=2, tie_word_embeddings=False, use_cache=True,
)
MOE: dict[str, Any] = dict(num_experts=4, num_local_experts=4, num_experts_per_tok=2,
                           moe_intermediate_size=32, shared_expert_intermediate_size=32)

#: per-architecture overrides on top of COMMON; None drops a COMMON key the config does not take
ARCHS: dict[str, dict[str, Any]] = {
    "llama": {}, "mistral": {}, "mixtral": dict(MOE), "qwen2": {}, "qwen2_moe": dict(MOE),
    "qwen3": {}, "qwen3_moe": dict(MOE), "gemma": {}, "gemma2": {}, "gemma3_text": {},
    "phi": {}, "phi3": {}, "gpt2": {}, "gpt_neox": {}, "gpt_bigcode": {}, "gptj": dict(rotary_dim=8),
    "falcon": dict(head_dim=None, new_decoder_architecture=True, num_kv_heads=2), "olmo": {}, "olmo2": {}, "stablelm": {}, "opt": dict(word_embed_proj_dim=64, ffn_dim=128),
    "bloom": {}, "starcoder2": {}, "cohere": {}, "granite": {},
    "deepseek_v3": dict(MOE, n_routed_experts=4, n_shared_experts=1, n_group=1, topk_group=1,
                        first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8,
                        qk_nope_head_dim=8, v_head_dim=16, head_dim=8,
                        num_key_value_heads=4),
    "smollm3": {}, "glm4": {}, "gpt_oss": dict(MOE), "helium": {},
    "glm": {}, "olmo3": {}, "ministral": {}, "seed_oss": {}, "arcee": {}, "exaone4": {},
    "codegen": dict(rotary_dim=8), "gpt_neo": dict(attention_types=[[["global", "local"], 1]], window_size=8),
    "biogpt": {}, "xglm": {}, "persimmon": {}, "nemotron": {}, "ernie4_5": {}, "apertus": {},
    "olmoe": dict(MOE), "granitemoe": dict(MOE), "phimoe": dict(MOE, router_jitter_noise=0.0, input_jitter_noise=0.0),
    "cohere2": {},
    # hybrid: a linear-attention (gated delta net) layer and a full-attention layer
    "qwen3_5_text": dict(layer_types=["linear_attention", "full_attention"]),
    # chunked attention (chunks of 32 tokens)
    "llama4_text": dict(MOE, attention_chunk_size=SLIDING_WINDOW, intermediate_size_mlp=128,
                        interleave_moe_layer_step=1, no_rope_layers=[1, 1]),
    # more causal LMs of transformers that build from this tiny config (benchmarks/discover_causal_lms.py)
    "apertus1p5_text": {}, "beam": {}, "bitnet": {}, "cwm": {}, "diffllama": {}, "doge": {},
    "flint": {}, "hunyuan_v1_dense": {}, "granite_swa": {}, "granitemoeshared": dict(MOE),
    "glm4_moe": dict(MOE, n_routed_experts=4, n_shared_experts=1, n_group=1, topk_group=1),
    # lmA rows (MoE ones: experts as batched_mm through the config, see ``build``)
    "afmoe": dict(MOE, experts_implementation="batched_mm"),
    "aria_text": dict(MOE, moe_num_experts=4, moe_topk=2, experts_implementation="batched_mm"),
    "cohere2_moe": dict(MOE, experts_implementation="batched_mm"),
    # CPM-Ant initialises every weight with std 1.0 (logits in the hundreds, loss ~21): 0.02 as the others
    "cpmant": dict(dim_head=16, dim_ff=128, init_std=0.02), "ctrl": dict(dff=128),
    # a sliding and a compressed-sparse attention layer, a hash-routed and a top-k MoE; projections shrunk
    "deepseek_v4": dict(MOE, n_routed_experts=4, experts_implementation="batched_mm", q_lora_rank=32,
                        o_lora_rank=16, o_groups=2, index_n_heads=4, index_head_dim=16, index_topk=8,
                        layer_types=["sliding_attention", "compressed_sparse_attention"],
                        mlp_layer_types=["hash_moe", "moe"]),
    "ernie4_5_moe": dict(MOE, experts_implementation="batched_mm"),
    "exaone_moe": dict(MOE, experts_implementation="batched_mm"),
    "falcon_mamba": {},
    "flex_olmo": dict(MOE, experts_implementation="batched_mm"),
    "fuyu": {},
    # the full-attention layer's head_dim (512) and the per-layer input embeddings (262144 x 256) shrunk
    "gemma4_text": dict(global_head_dim=32, vocab_size_per_layer_input=VOCAB, hidden_size_per_layer_input=16),
    "gemma4_unified_text": dict(global_head_dim=32),
    "gpt_neox_japanese": {},
    "granitemoe_swa": dict(MOE, experts_implementation="batched_mm"),
    "hrm_text": {},
    # lmB rows
    "hunyuan_v1_moe": dict(MOE, moe_topk=2, experts_implementation="batched_mm"),
    "hy_v3": dict(MOE, num_shared_experts=1, experts_implementation="batched_mm"),
    "hy_v4": dict(MOE, n_routed_experts=4, n_shared_experts=1, n_group=1, topk_group=1, q_lora_rank=32,
                  kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=16, index_topk=64,
                  index_head_dim=16, index_n_heads=2, experts_implementation="batched_mm"),
    "hyperclovax": {}, "jais2": {}, "jetmoe": dict(MOE),
    "inkling_text": dict(MOE, n_routed_experts=4, n_shared_experts=1, swa_num_attention_heads=4,
                         swa_num_key_value_heads=2, swa_head_dim=16, layer_types=["hybrid_sliding", "hybrid"],
                         rel_extent=64, experts_implementation="batched_mm"),
    "inkling2_text": dict(MOE, n_routed_experts=4, unpadded_vocab_size=VOCAB, swa_num_attention_heads=4,
                          swa_num_key_value_heads=2, swa_head_dim=16, layer_types=["hybrid_sliding", "hybrid"],
                          rel_extent=64, log_scaling_n_floor=64, experts_implementation="batched_mm"),
    "inkling2_loop_text": dict(MOE, n_routed_experts=4, unpadded_vocab_size=VOCAB, swa_num_attention_heads=4,
                               swa_num_key_value_heads=2, swa_head_dim=16,
                               layer_types=["hybrid_sliding", "hybrid"], rel_extent=64, log_scaling_n_floor=64,
                               n_layers_per_attn_res_block=1, loop_layer_index_start=1, loop_layer_index_end=2,
                               loop_num_passes=2, loop_gate_rank=8, experts_implementation="batched_mm"),
    "kolibri1": dict(MOE, experts_implementation="batched_mm"),
    "laguna": dict(MOE, layer_types=["sliding_attention", "full_attention"], experts_implementation="batched_mm"),
    "lara_mini": dict(MOE, linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
                      linear_num_value_heads=4, experts_implementation="batched_mm"),
    "lfm2": dict(layer_types=["conv", "full_attention"]), "mamba": {},
    "mellum": dict(MOE, layer_types=["sliding_attention", "full_attention"], experts_implementation="batched_mm"),
    "mimo_v2_flash": dict(MOE, n_routed_experts=4, v_head_dim=16, experts_implementation="batched_mm"),
    # lmC rows (MoE ones name batched_mm in the config: static-shape experts, as MOE_BATCHED)
    "minimax": dict(MOE, experts_implementation="batched_mm"),
    "minimax_m2": dict(MOE, experts_implementation="batched_mm"),
    "minimax_m3_vl_text": dict(MOE, experts_implementation="batched_mm", rotary_dim=8, index_head_dim=16,
                               dense_intermediate_size=128, shared_intermediate_size=32),
    "ministral3": {}, "modernbert-decoder": {}, "moshi": dict(ffn_dim=128), "mpt": {}, "nanochat": {},
    # mamba2 mixer, MoE, attention and MLP layers
    "nemotron_h": dict(MOE, experts_implementation="batched_mm", n_routed_experts=4,
                       moe_shared_expert_intermediate_size=32, mamba_num_heads=8, mamba_head_dim=16,
                       ssm_state_size=16, n_groups=1, chunk_size=32,
                       layers_block_type=["mamba", "moe", "attention", "mlp"]),
    "olmo_hybrid": {}, "openai-gpt": {}, "rwkv": {},
    "solar_open": dict(MOE, experts_implementation="batched_mm", n_routed_experts=4),
    "vaultgemma": {},
    "zaya": dict(MOE, experts_implementation="batched_mm", num_experts_per_tok=1, router_hidden_size=32),
    # its FFN and attention settings live in sub-configs the shared keys do not reach; its experts are a
    # Python loop over the experts hit (graph breaks, a per-expert slice of each packed weight as a graph
    # input), and clip_qkv clamps the fused QKV projection. d_model by name: the config copies it into
    # ffn_config before the shared ``hidden_size`` alias is applied
    "dbrx": dict(d_model=64, hidden_size=None, ffn_config={"ffn_hidden_size": 128, "moe_num_experts": 4, "moe_top_k": 2},
                 attn_config={"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0}),
}
#: rows trained at fewer tokens than the matrix's 130: rwkv's CPU WKV (``rwkv_linear_attention_cpu``)
#: is a Python loop over positions that Dynamo unrolls into one graph of ~20 ops per position and
#: layer; at 130 tokens tracing alone (stock ``backend="aot_eager"``, forward and backward) did not
#: finish in 900 s on the shared 2-core machine. Its sequence axis is never tiled (one position per
#: step), only its linear layers' rows (2 x 24 = 48 here)
SHORT_SEQ: dict[str, int] = {"rwkv": 24}
#: the 30 architectures issue 4 names (``--only core`` runs them)
CORE = tuple(list(ARCHS)[:30])
#: the families that must compile with no fallback at all
ZERO_FALLBACK = ("llama", "mistral", "qwen2", "qwen3")
#: their MoE variants may fall back only on data-dependent routing (which experts a token picks)
MOE_FAMILY = ("mixtral", "qwen2_moe", "qwen3_moe")
MOE_BATCHED = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "granitemoe", "phimoe", "gpt_oss", "deepseek_v3",
               "granitemoeshared", "glm4_moe")
ROUTING_FALLBACKS = frozenset({"aten.topk.default", "aten.sort.default", "aten.argsort.default",
                               "aten.nonzero.default"})


def allowed_fallbacks(arch: str) -> frozenset[str] | None:
    """The fallback ops ``arch`` may have; None = not constrained (reported only)."""
    if arch in ZERO_FALLBACK:
        return frozenset()
    if arch in MOE_FAMILY:
        return ROUTING_FALLBACKS
    return None


def tiny_config(arch: str) -> Any:
    from transformers import AutoConfig
    kw = dict(COMMON)
    kw.update(ARCHS[arch])
    kw = {k: v for k, v in kw.items() if v is not None}
    cfg = AutoConfig.for_model(arch, **kw)
    if getattr(cfg, "sliding_window", None) is not None:  # cross the window in training and generate
        cfg.sliding_window = SLIDING_WINDOW
    for name in dir(cfg):  # no randomness in training: dropouts off
        if ("dropout" in name or name.endswith("_pdrop")) and isinstance(getattr(cfg, name, None), float):
            setattr(cfg, name, 0.0)
    return cfg


def build(arch: str, seed: int = 0) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    cfg = tiny_config(arch)
    # MoE: "batched_mm" (gather each token's expert weights, batched matmul) has static shapes;
    # the default grouped_mm sorts tokens by expert into data-dependent groups (host fallbacks)
    kw = {"experts_implementation": "batched_mm"} if arch in MOE_BATCHED else {}
    model = AutoModelForCausalLM.from_config(cfg, **kw)
    _untie_routers(model, getattr(cfg, "initializer_range", 0.02))
    return model.float()


def _untie_routers(model: torch.nn.Module, std: float) -> None:
    """Random weights for MoE routers that initialise to zero (afmoe's ``router.gate``).

    A zero router scores every expert alike, so every token's top-k is an exact tie, and torch
    leaves the order of tied ``topk`` values unspecified (CPU returns its selection algorithm's
    order): two correct implementations then route every token differently. A trained router is
    not zero; a random one, as in a checkpoint, makes the routing well defined."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 and "router" in name and not bool(p.any()):
                p.copy_(torch.randn(p.shape, generator=gen) * std)
        _untie_hash_routes(model, gen)


def _untie_hash_routes(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Distinct random experts in hash routers' token -> experts tables (deepseek_v4's
    ``tid2eid``) that initialise to zeros.

    A zero table sends every token to expert 0 in each of its k slots; the routing weights
    ``s_0 / (k s_0)`` are then the constant 1/k, whose gradient with respect to the gate is exactly
    zero and computed as rounding noise that two correct runs do not share. A checkpoint's table
    names k distinct experts per token."""
    for module in model.modules():
        table = getattr(module, "tid2eid", None)
        n = getattr(module, "num_experts", None)
        if isinstance(table, torch.Tensor) and n and table.dim() == 2 and not bool(table.any()):
            order = torch.rand(table.shape[0], n, generator=gen).argsort(dim=-1)
            table.copy_(order[:, :table.shape[1]].to(table.dtype))


def is_sliding(model: Any) -> bool:
    """Whether ``model``'s static cache has a sliding-window or chunked-attention layer."""
    from transformers.cache_utils import StaticCache
    try:
        return any(StaticCache(config=model.config, max_cache_len=8).is_sliding)
    except Exception:  # noqa: BLE001 - a config StaticCache cannot take has no sliding layers to test
        return False
