"""Causal-LM architecture matrix: tiny random-weight models from transformers, compiled vs eager.

    python benchmarks/architectures.py [--only llama,gpt2] [--seq 300] [--dtypes float32,bfloat16] [--json]

For every architecture (a tiny config: hidden 64, 2 layers, 4 heads, vocab 128; no downloads) it
checks, against eager PyTorch, on real training inputs: a batch of two rows, ``--seq`` tokens long
(default 130: two 128-row tiles, not a multiple of 128), the second row padded by a third of its
length on the LEFT (one run) or on the RIGHT (another run), ``attention_mask`` zero there and
``labels`` -100 there, in float32 and bfloat16:
  fwd       logits and loss of one training step of ``torch.compile(model, backend="neuron")``
  grads     the same step's backward: every parameter's gradient
  generate  greedy ``generate(cache_implementation="static")`` on a compiled forward (prefill and
            decode graphs): same tokens and logits at every step, and decode steps after the first
            compile nothing (Dynamo graph counts). Sliding-window models (window set to
            ``SLIDING_WINDOW``) generate 64 new tokens, past their window; the others 4.
float32 is compared with eager float32 (summation order is the only difference). bfloat16 is
compared by error against an eager float32 run of the same (bf16-rounded) weights: the compiled
error may be at most ``BF16_FACTOR`` times eager bfloat16's own error (plus a small floor).
It prints a table with one column per (dtype, padding side, check), the declared fallback ops of all
graphs, and the wall time. ``tests/integrations/test_architectures.py`` runs the same checks.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import sys
import tempfile
import time
import traceback
from collections import Counter
from typing import Any, Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

BATCH, SEQ, VOCAB = 2, 130, 128
#: the padded row loses this fraction of its tokens to padding
PAD_FRACTION = 1 / 3
#: sliding-window models get this window, so training at SEQ and 64-token generation cross it
SLIDING_WINDOW = 32
GEN_TOKENS, GEN_TOKENS_SLIDING, GEN_PROMPT = 4, 64, 16
#: fp32 everywhere; only summation order differs (attention/softmax/norms), so a loose-ish fp32 bound
FWD_TOL = dict(rtol=1e-4, atol=1e-4)
GRAD_TOL = dict(rtol=1e-3, atol=1e-4)
#: bf16: compiled error vs the fp32 reference <= BF16_FACTOR * eager bf16's error + BF16_FLOOR
BF16_FACTOR, BF16_FLOOR = 2.0, 1e-3
DTYPES = ("float32", "bfloat16")
SIDES = ("right", "left")

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
}
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
    return model.float()


def is_sliding(model: Any) -> bool:
    """Whether ``model``'s static cache has a sliding-window or chunked-attention layer."""
    from transformers.cache_utils import StaticCache
    try:
        return any(StaticCache(config=model.config, max_cache_len=8).is_sliding)
    except Exception:  # noqa: BLE001 - a config StaticCache cannot take has no sliding layers to test
        return False


def column(dtype: str, side: str) -> str:
    return f"{'fp32' if dtype == 'float32' else 'bf16'} {side}"


@dataclasses.dataclass
class Result:
    arch: str
    #: per (dtype, padding side) column: {"fwd": ok, "grads": ok}; None = not run
    train: dict[str, dict[str, bool]] = dataclasses.field(default_factory=dict)
    generate: bool | None = None
    gen_tokens: int = 0
    fallbacks: dict[str, int] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    errors: dict[str, str] = dataclasses.field(default_factory=dict)
    #: columns whose bf16 grads matched only with float32 routers (see ``check_train``): the bf16 error
    ties: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        ran = [v for c in self.train.values() for v in c.values()]
        if self.generate is not None:
            ran.append(self.generate)
        return bool(ran) and all(ran) and not self.errors


def _compile(model: Any, cache_dir: str | None = None) -> Any:
    # a private cache per architecture: the left- and right-padded steps share their graphs
    opts = {"cache_dir": cache_dir} if cache_dir else {"cache": False}
    return torch.compile(model, backend="neuron", options=opts)


def padded_batch(seq: int, side: str, seed: int = 1) -> dict[str, torch.Tensor]:
    """Two rows of ``seq`` tokens; row 1 padded on ``side`` (pad id 0, mask 0, label -100)."""
    ids = torch.randint(3, VOCAB, (BATCH, seq), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    pad = max(1, int(seq * PAD_FRACTION))
    if side == "left":
        mask[1, :pad] = 0
    elif side == "right":
        mask[1, seq - pad:] = 0
    elif side != "none":
        raise ValueError(f"padding side {side!r}: expected left, right or none")
    ids = ids.masked_fill(mask == 0, COMMON["pad_token_id"])
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.detach().double(), ref.detach().double()
    return float((x - ref).norm() / ref.norm().clamp_min(1e-12))


def _compare(name: str, got: torch.Tensor, expected: torch.Tensor, ref: torch.Tensor | None,
             tol: dict) -> str | None:
    """None when ``got`` matches: fp32 (``ref`` None) elementwise within ``tol``; bf16 by error
    against the fp32 ``ref`` no worse than BF16_FACTOR x eager bf16's own (+ BF16_FLOOR)."""
    if ref is None:
        try:
            torch.testing.assert_close(got, expected, **tol)
            return None
        except AssertionError:
            d = (got.double() - expected.double()).abs()
            return f"{name}: max abs diff {d.max().item():.3g}, relative error {_rel(got, expected):.3g}"
    e_c, e_e = _rel(got, ref), _rel(expected, ref)
    if e_c <= BF16_FACTOR * e_e + BF16_FLOOR:
        return None
    return f"{name}: error vs fp32 {e_c:.3g} (eager bf16: {e_e:.3g})"


def _where(diff_rows: torch.Tensor, mask: torch.Tensor) -> str:
    """Where logits disagree: padded positions only, or real ones too (the latter poisons training)."""
    bad = diff_rows.any(-1)
    real = bool((bad & (mask == 1)).any())
    return " (at real tokens)" if real else " (only at padded positions)"


def _step(model: Any, batch: dict, compiled: bool, cache_dir: str | None) -> tuple[Any, dict]:
    model.zero_grad(set_to_none=True)
    out = (_compile(model, cache_dir) if compiled else model)(**batch)
    out.loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return out, grads


def _routers(model: Any) -> list[torch.nn.Module]:
    """The MoE router modules: a 2-D weight with one row per routed expert."""
    cfg = model.config
    n = next((getattr(cfg, a) for a in ("num_local_experts", "num_experts", "n_routed_experts")
              if isinstance(getattr(cfg, a, None), int)), None)
    return [m for name, m in model.named_modules()
            if n and name.rsplit(".", 1)[-1] in ("gate", "router")
            and getattr(m, "weight", None) is not None and m.weight.dim() == 2 and m.weight.shape[0] == n]


def _fp32_routers(model: Any) -> None:
    """Routers computed in float32 (inputs cast up): bf16 router logits tie often, and torch leaves
    the order of tied ``topk`` values unspecified, so eager and compiled may route a tied token to
    different experts; with float32 logits both pick the same ones and the rest of the bf16 step
    is compared as usual."""
    def up(_mod, args, kwargs):
        cast = lambda v: v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v  # noqa: E731
        return tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}
    for m in _routers(model):
        m.float()
        m.register_forward_pre_hook(up, with_kwargs=True)


def check_train(model: Any, batch: dict, dtype: str = "float32",
                cache_dir: str | None = None, fp32_router: bool = False) -> dict[str, str | None]:
    """One training step on ``batch`` (loss with labels), compiled vs eager, in ``dtype``: logits
    and loss ("fwd") and every parameter's gradient ("grads"). Dropouts are 0.

    A bf16 MoE step whose gradients differ is run again with its routers in float32
    (:func:`_fp32_routers`); if that run matches, the gradients are reported under "router-tie"
    (a tie broken the other way, not a wrong number) instead of failing."""
    model.train()
    ref = ref_grads = None
    if dtype == "bfloat16":
        work = copy.deepcopy(model).to(torch.bfloat16)
        if fp32_router:
            _fp32_routers(work)
        exact = copy.deepcopy(work).float()  # fp32 reference with the same (rounded) weights
        ref, ref_grads = _step(exact, batch, False, None)
        del exact
    else:
        work = model
    out_e, exp_grads = _step(work, batch, False, None)
    out_c, got_grads = _step(work, batch, True, cache_dir)
    errors: dict[str, str | None] = {"fwd": None, "grads": None}
    problems = [_compare("logits", out_c.logits.float(), out_e.logits.float(),
                         None if ref is None else ref.logits.float(), FWD_TOL),
                _compare("loss", out_c.loss.float(), out_e.loss.float(),
                         None if ref is None else ref.loss.float(), FWD_TOL)]
    if problems[0] is not None:
        rows = ~torch.isclose(out_c.logits.float(), out_e.logits.float(), rtol=1e-2, atol=1e-2)
        problems[0] += _where(rows, batch["attention_mask"])
    problems = [p for p in problems if p]
    errors["fwd"] = "; ".join(problems) or None
    if got_grads.keys() != exp_grads.keys():
        errors["grads"] = f"grads differ in which params: {sorted(got_grads.keys() ^ exp_grads.keys())}"
    else:
        bad = [e for n in exp_grads if (e := _compare(
            f"grad {n}", got_grads[n].float(), exp_grads[n].float(),
            None if ref_grads is None else ref_grads[n].float(), GRAD_TOL))]
        if bad:
            errors["grads"] = f"{len(bad)}/{len(exp_grads)} parameters wrong: " + "; ".join(bad[:4])
    if errors["grads"] and dtype == "bfloat16" and not fp32_router and _routers(model):
        torch._dynamo.reset()
        try:
            again = check_train(model, batch, dtype, None, fp32_router=True)
        except Exception as e:  # noqa: BLE001 - a model whose router cannot run in fp32 keeps its failure
            again = {"grads": f"{type(e).__name__}: {e}"}
        if again["grads"] is None:
            errors["router-tie"], errors["grads"] = errors["grads"], None
    return errors


def check_generate(model: Any, ids: torch.Tensor, max_new_tokens: int = 4) -> dict[str, str | None]:
    """Static-cache greedy generation on a compiled forward: same tokens, same logits at every step,
    and no compile after the first decode step (prefill and decode are one graph each)."""
    from neuron_inductor.integrations.hf import compile_forward, restore_forward, static_generate
    model.eval()
    # min_new_tokens: an early EOS would leave too few decode steps to prove the decode graph is reused
    kw = dict(output_logits=True, return_dict_in_generate=True, min_new_tokens=max_new_tokens)
    with torch.no_grad():  # the reference is transformers' own static-cache path, eagerly
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                  do_sample=False, cache_implementation="static", **kw)
    probe = compile_forward(model, options={"cache": False})
    try:
        got = static_generate(model, ids, max_new_tokens, **kw)
    finally:
        restore_forward(model)
    try:
        for i, (a, b) in enumerate(zip(got.logits, expected.logits)):
            torch.testing.assert_close(a, b, **FWD_TOL, msg=lambda m, i=i: f"logits of step {i}: {m}")
        assert torch.equal(got.sequences, expected.sequences), \
            f"tokens differ:\n{got.sequences}\nvs eager\n{expected.sequences}"
        assert len(probe.graphs_after) == max_new_tokens, probe.graphs_after
        assert probe.decode_recompiles() == 0, \
            f"decode steps recompiled: Dynamo graphs after each call {probe.graphs_after}"
    except AssertionError as e:
        return {"generate": str(e)}
    return {"generate": None}


CHECKS = ("train", "generate")


def _guard(res: Result, key: str, fn: Callable[[], dict[str, str | None]]) -> dict[str, str | None]:
    """Run one check; a crash fails it with the exception as the error."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - a crash is a failed cell, the next check still runs
        if os.environ.get("ARCH_TRACEBACK"):
            traceback.print_exc()
        return {"crash": f"{type(e).__name__}: {str(e)[:2000]}"}


def run_arch(arch: str, checks: tuple[str, ...] = CHECKS, dtypes: tuple[str, ...] = DTYPES,
             sides: tuple[str, ...] = SIDES, seq: int = SEQ) -> Result:
    """Every check on a fresh tiny model; a failing check is recorded and the next still runs."""
    import neuron_inductor.compile as nc
    res = Result(arch)
    t0 = time.perf_counter()
    before = Counter(nc.fallback_ops)
    try:
        model = build(arch)
    except Exception as e:  # noqa: BLE001 - a config that does not build is a row, not a crash
        res.errors["build"] = f"{type(e).__name__}: {e}"
        res.seconds = time.perf_counter() - t0
        return res
    with tempfile.TemporaryDirectory(prefix="arch_cache_") as cache_dir:
        if "train" in checks:
            for dtype in dtypes:
                for side in sides:
                    torch._dynamo.reset()
                    col = column(dtype, side)
                    out = _guard(res, col, lambda: check_train(model, padded_batch(seq, side), dtype,
                                                               cache_dir))
                    if "crash" in out:
                        out = {"fwd": out["crash"], "grads": out["crash"]}
                    tie = out.pop("router-tie", None)
                    if tie:
                        res.ties[col] = tie[:2000]
                    res.train[col] = {k: v is None for k, v in out.items()}
                    for k, v in out.items():
                        if v is not None:
                            res.errors[f"{col} {k}"] = v[:2000]
        if "generate" in checks:
            torch._dynamo.reset()
            res.gen_tokens = GEN_TOKENS_SLIDING if is_sliding(model) else GEN_TOKENS
            prompt = padded_batch(GEN_PROMPT, "none")["input_ids"]
            out = _guard(res, "generate", lambda: check_generate(model, prompt, res.gen_tokens))
            err = out.get("generate", out.get("crash"))
            res.generate = err is None
            if err is not None:
                res.errors["generate"] = err[:2000]
    torch._dynamo.reset()
    res.fallbacks = dict(Counter(nc.fallback_ops) - before)
    res.seconds = time.perf_counter() - t0
    return res


def _mark(v: bool | None) -> str:
    return "-" if v is None else ("ok" if v else "FAIL")


def table(results: list[Result]) -> str:
    cols = list(dict.fromkeys(c for r in results for c in r.train))
    head = ["architecture"] + [f"{c} fwd/grads" for c in cols] + ["generate", "fallback ops", "seconds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [r.arch]
        for c in cols:
            t = r.train.get(c)
            grads = "tie" if c in r.ties else _mark(t.get("grads")) if t else "-"
            cells.append("-" if t is None else f"{_mark(t.get('fwd'))}/{grads}")
        gen = _mark(r.generate) + (f" ({r.gen_tokens} tok)" if r.generate is not None else "")
        fb = ", ".join(f"{k.replace('aten.', '')}×{v}" for k, v in sorted(r.fallbacks.items()))
        n = sum(r.fallbacks.values())
        if "build" in r.errors:
            gen = "does not build"
        cells += [gen, f"{n}{' (' + fb + ')' if fb else ''}", f"{r.seconds:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    passed = sum(r.ok for r in results)
    lines.append(f"\n{passed}/{len(results)} architectures pass every check.")
    if any(r.ties for r in results):
        lines.append("tie: bf16 MoE gradients that match eager once the router runs in float32 (a "
                     "bf16 router's tied top-k logits, whose order torch leaves unspecified, went to "
                     "other experts).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated architectures (default: all)")
    ap.add_argument("--checks", default=",".join(CHECKS), help="comma-separated subset of checks")
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated training dtypes")
    ap.add_argument("--sides", default=",".join(SIDES), help="padding sides of the training batch")
    ap.add_argument("--seq", type=int, default=SEQ, help=f"training sequence length (default {SEQ})")
    ap.add_argument("--json", action="store_true", help="print JSON rows instead of the table")
    ap.add_argument("--errors", action="store_true", help="print each failure's message")
    args = ap.parse_args(argv)
    import logging
    logging.getLogger("neuron_inductor").setLevel(logging.ERROR)  # fallbacks are in the table
    archs = (list(CORE) if args.only == "core" else args.only.split(",")) if args.only else list(ARCHS)
    unknown = [a for a in archs if a not in ARCHS]
    if unknown:
        ap.error(f"unknown architecture(s) {unknown}; known: {', '.join(ARCHS)}")
    results = []
    for arch in archs:
        r = run_arch(arch, tuple(args.checks.split(",")), tuple(args.dtypes.split(",")),
                     tuple(args.sides.split(",")), args.seq)
        results.append(r)
        cells = " ".join(f"{c}={_mark(v.get('fwd'))}/{_mark(v.get('grads'))}" for c, v in r.train.items())
        print(f"{arch}: {cells} gen={_mark(r.generate)} fallbacks={r.fallbacks} {r.seconds:.1f}s",
              file=sys.stderr, flush=True)
        if args.errors:
            for k, v in r.errors.items():
                print(f"    {k}: {v[:600]}", file=sys.stderr, flush=True)
            for k, v in r.ties.items():
                print(f"    {k} grads (router tie; ok with float32 routers): {v[:600]}", file=sys.stderr,
                      flush=True)
    if args.json:
        print(json.dumps([dataclasses.asdict(r) | {"ok": r.ok} for r in results], indent=1))
    else:
        print(f"(seq {args.seq}, batch {BATCH}, row 1 padded by {PAD_FRACTION:.0%}; "
              f"sliding window {SLIDING_WINDOW})\n")
        print(table(results))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
