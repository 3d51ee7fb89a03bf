"""The matrix's checks on the causal LMs that are not rows of it but build from a tiny config.

    python benchmarks/causal_lm_sweep.py [--only ergo,encoders] [--timeout 600] [--dtypes float32]
                                         [--checks train,generate] [--jsonl out.jsonl] [--table out.jsonl]

``benchmarks/discover_causal_lms.py`` finds which model types of ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``
build and train eagerly from the shared tiny config; this script runs ``benchmarks/architectures.py``'s
checks (compiled vs eager training on left- and right-padded batches, generate) on those that are not
rows of the matrix, each in a forked child with a timeout (one hung or multi-GB model does not stop
the sweep). ``SWEEP`` holds each type's config overrides on top of ``COMMON``, as ``ARCHS`` does for
the rows. It prints the matrix's table and one JSON row per type (``--jsonl`` appends them to a file).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import os
import sys
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import arch_checks as A  # noqa: E402
from arch_table import table  # noqa: E402

VOCAB = A.VOCAB

#: decoder-only types new in transformers 5.25 that build from the tiny config
#: (MoE sizes shrunk to the matrix's ``MOE``, experts as ``batched_mm`` like the MoE rows)
NEW: dict[str, dict[str, Any]] = {
    # defaults: 256 experts of 4096, a 32768-wide dense block, every layer sliding
    "ergo": dict(A.MOE, num_experts=4, moe_intermediate_size=32, first_dense_intermediate_size=128,
                 shared_intermediate_size=32, layer_types=["sliding_attention", "full_attention"],
                 experts_implementation="batched_mm"),
    "minicpm5_moe": dict(A.MOE, n_routed_experts=4, experts_implementation="batched_mm"),
    # its indexer's head count must not exceed the query heads of a key head (4 heads / 2 KV heads);
    # by default both layers are dense (``mlp_only_layers``): layer 1 made MoE
    "kolibri1_1": dict(A.MOE, index_num_heads=2, mlp_only_layers=[0], mlp_only_intermediate_size=128,
                       experts_implementation="batched_mm"),
}
#: types whose defaults do not fit the shared tiny config, with the overrides that make them build
#: (sizes shrunk, an attention layer among the recurrent ones, per-arch head dims like deepseek_v3's)
_MLA = dict(kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16,
            head_dim=8, num_key_value_heads=4)
_MOE = dict(A.MOE, experts_implementation="batched_mm")
_MAMBA = dict(mamba_n_heads=8, mamba_d_head=16, mamba_d_state=16, mamba_chunk_size=32)
OVERRIDDEN: dict[str, dict[str, Any]] = {
    "bamba": dict(_MAMBA, attn_layer_indices=[1]),
    "granitemoehybrid": dict(_MOE, **_MAMBA, layer_types=["mamba", "attention"]),
    "jamba": dict(_MOE, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1,
                  mamba_d_state=16, use_mamba_kernels=False),
    "qwen3_next": dict(_MOE, layer_types=["linear_attention", "full_attention"], linear_key_head_dim=16,
                       linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4),
    "qwen3_5_moe_text": dict(_MOE, layer_types=["linear_attention", "full_attention"]),
    "recurrent_gemma": dict(block_types=["recurrent", "attention"], lru_width=64, attention_window_size=32),
    "lfm3": dict(layer_types=["conv", "full_attention"]),
    "mamba2": dict(num_heads=8, head_dim=16, state_size=16, n_groups=1, chunk_size=32),
    "zamba2": dict(mamba_d_state=16, mamba_headdim=16, n_mamba_heads=8, layers_block_type=["mamba", "hybrid"]),
    "deepseek_v2": dict(_MOE, n_routed_experts=4, n_shared_experts=1, first_k_dense_replace=1, **_MLA),
    "glm4_moe_lite": dict(_MOE, n_routed_experts=4, n_shared_experts=1, n_group=1, topk_group=1,
                          first_k_dense_replace=1, **_MLA),
    "longcat_flash": dict(_MOE, n_routed_experts=4, **_MLA),
    "minicpm3": dict(_MLA), "youtu": dict(_MLA),
    "dots1": dict(_MOE, n_routed_experts=4, n_shared_experts=1, first_k_dense_replace=1),
    "lfm2_moe": dict(_MOE, layer_types=["conv", "full_attention"], num_dense_layers=1),
    "kimi_linear": dict(_MOE, num_key_value_heads=4, linear_attn_config={
        "full_attn_layers": [2], "kda_layers": [1], "num_heads": 4, "head_dim": 16, "short_conv_kernel_size": 4}),
    "bailing_hybrid": dict(_MOE, layer_types=["linear_attention", "full_attention"], num_key_value_heads=4),
    "axk2": dict(_MOE, n_routed_experts=4, **_MLA),
    "deepseek_v32": dict(_MOE, n_routed_experts=4, n_group=1, topk_group=1, index_n_heads=4, index_head_dim=16,
                         index_topk=8, **_MLA),
    "glm_moe_dsa": dict(_MOE, n_routed_experts=4, n_group=1, topk_group=1, index_n_heads=4, index_head_dim=16,
                        index_topk=8, **_MLA),
    "gemma3n_text": dict(num_kv_shared_layers=0, hidden_size_per_layer_input=16, vocab_size_per_layer_input=VOCAB,
                         laurel_rank=8, altup_num_inputs=2),
    "dots3_note_text": dict(_MOE, n_routed_experts=4, moe_intermediate_size=32, shared_experts_intermediate_size=32,
                            kv_lora_rank=16, q_lora_rank=32, v_head_dim=16, qk_nope_head_dim=8, qk_rope_head_dim=8,
                            index_topk=8, index_head_dim=16, num_key_value_heads=4),
}
#: decoder halves of encoder-decoder models (their ``*ForCausalLM``: the decoder stack alone), sized
#: by their own encoder/decoder keys (the shared ``num_hidden_layers`` alone leaves the decoder empty)
_ENC_DEC = dict(encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                encoder_ffn_dim=128, decoder_ffn_dim=128, d_model=64, head_dim=None, num_key_value_heads=None)
DECODER_HALVES: dict[str, dict[str, Any]] = {
    **{t: dict(_ENC_DEC) for t in ("bart", "mbart", "marian", "pegasus", "blenderbot", "blenderbot-small", "mvp",
                                   "bigbird_pegasus", "plbart", "whisper")},
    "trocr": dict(decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=128, d_model=64, head_dim=None,
                  num_key_value_heads=None),
    "prophetnet": dict(num_encoder_layers=2, num_decoder_layers=2, num_encoder_attention_heads=4,
                       num_decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, head_dim=None,
                       num_key_value_heads=None, num_hidden_layers=None),
}
#: encoder architectures with a causal-LM head (``is_decoder=True``: causal self-attention)
ENCODERS_AS_DECODERS = ("bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra",
                        "ernie", "megatron-bert", "rembert", "roberta", "roberta-prelayernorm", "roc_bert",
                        "roformer", "xlm", "xlm-roberta", "xlm-roberta-xl")
SWEEP: dict[str, dict[str, Any]] = {**NEW, **OVERRIDDEN, **DECODER_HALVES, **{t: dict(is_decoder=True) for t in ENCODERS_AS_DECODERS}}


def _child(arch: str, checks: tuple, dtypes: tuple, sides: tuple, q: Any) -> None:
    A.ARCHS[arch] = SWEEP[arch]
    torch.set_num_threads(1)
    res = A.run_arch(arch, checks, dtypes, sides)
    q.put(dataclasses.asdict(res))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated model types or groups (new, overridden, decoder_halves, "
                                   "encoders; default: every type in SWEEP)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per model type")
    ap.add_argument("--checks", default="train,generate")
    ap.add_argument("--dtypes", default="float32")
    ap.add_argument("--sides", default=",".join(A.SIDES))
    ap.add_argument("--jsonl", help="also append the rows to this file")
    ap.add_argument("--table", metavar="JSONL", help="only print the table of the rows in this file")
    args = ap.parse_args(argv)
    if args.table:
        return _print_table([json.loads(line) for line in open(args.table) if line.strip()])
    import logging
    logging.getLogger("neuron_inductor").setLevel(logging.ERROR)
    groups = {"new": list(NEW), "overridden": list(OVERRIDDEN), "decoder_halves": list(DECODER_HALVES),
              "encoders": list(ENCODERS_AS_DECODERS)}
    todo = [t for name in args.only.split(",") for t in groups.get(name, [name])] if args.only else list(SWEEP)
    unknown = [t for t in todo if t not in SWEEP]
    if unknown:
        ap.error(f"not in SWEEP: {unknown}")
    ctx = mp.get_context("fork")
    sink = open(args.jsonl, "a") if args.jsonl else None
    results, notes = [], []
    for arch in todo:
        q = ctx.Queue()
        p = ctx.Process(target=_child, args=(arch, tuple(args.checks.split(",")),
                                             tuple(args.dtypes.split(",")), tuple(args.sides.split(",")), q))
        t0 = time.time()
        p.start()
        row: dict | None = None
        while p.is_alive() and time.time() - t0 < args.timeout:
            try:
                row = q.get(timeout=5)
                break
            except Exception:  # noqa: BLE001 - queue.Empty: still running
                pass
        if row is None and not p.is_alive():
            try:
                row = q.get(timeout=2)
            except Exception:  # noqa: BLE001 - the child died without a word
                pass
        if p.is_alive():
            p.join(5)
        if p.is_alive():
            p.kill()
        p.join()
        if row is None:
            why = f"timeout (over {args.timeout:.0f} s)" if time.time() - t0 >= args.timeout \
                else f"crash (exit code {p.exitcode})"
            row = {"arch": arch, "stage": why, "seconds": round(time.time() - t0, 1)}
            notes.append(f"{arch}: {why}")
        else:
            res = A.Result(**row)
            results.append(res)
            row = row | {"ok": res.ok}
        print(json.dumps(row), file=sys.stderr, flush=True)
        if sink:
            sink.write(json.dumps(row) + "\n")
            sink.flush()
    print(table(results))
    for n in notes:
        print(n)
    return 0 if not notes and all(r.ok for r in results) else 1


def _print_table(rows: list[dict]) -> int:
    """The matrix's table of the rows that ran; the types that timed out or crashed listed below it."""
    results = [A.Result(**{k: v for k, v in r.items() if k != "ok"}) for r in rows if "stage" not in r]
    print(table(results))
    for r in rows:
        if "stage" in r:
            print(f"{r['arch']}: {r['stage']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
