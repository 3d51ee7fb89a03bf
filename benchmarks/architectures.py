"""Causal-LM architecture matrix: tiny random-weight models from transformers, compiled vs eager.

    python benchmarks/architectures.py [--only llama,gpt2] [--json]

For every architecture (a tiny config: hidden 64, 2 layers, 4 heads, vocab 128, batch 2, seq 16; no
downloads) it checks, against eager PyTorch:
  forward   logits and loss of ``torch.compile(model, backend="neuron")`` on a training step
  grads     the same step's backward: every parameter's gradient
  generate  ``generate(max_new_tokens=4, cache_implementation="static")`` on a compiled forward
            (inference graphs: prefill and decode) gives the same logits at every step and the same
            tokens, and decode steps after the first compile nothing (Dynamo graph counts)
and prints a table with the declared fallback ops of all its graphs and the wall time.
``tests/integrations/test_architectures.py`` runs the same checks under pytest.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import traceback
from collections import Counter
from typing import Any, Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

BATCH, SEQ, VOCAB = 2, 16, 128
#: fp32 everywhere; only summation order differs (attention/softmax/norms), so a loose-ish fp32 bound
FWD_TOL = dict(rtol=1e-4, atol=1e-4)
GRAD_TOL = dict(rtol=1e-3, atol=1e-4)

#: shared by every tiny config; names are the transformers-standard ones (configs map them via attribute_map)
COMMON: dict[str, Any] = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
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
}
#: the 30 architectures issue 4 names; pytest runs these (CI time), the benchmark runs all of ARCHS
CORE = tuple(list(ARCHS)[:30])
#: the families that must compile with no fallback at all
ZERO_FALLBACK = ("llama", "mistral", "qwen2", "qwen3")
#: their MoE variants may fall back only on data-dependent routing (which experts a token picks)
MOE_FAMILY = ("mixtral", "qwen2_moe", "qwen3_moe")
MOE_BATCHED = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "granitemoe", "phimoe", "gpt_oss", "deepseek_v3")
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


@dataclasses.dataclass
class Result:
    arch: str
    forward: bool | None = None
    grads: bool | None = None
    generate: bool | None = None
    fallbacks: dict[str, int] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    errors: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.forward and self.grads and self.generate)


def _compile(model: Any) -> Any:
    # the benchmark wants every graph built (fallbacks counted); the cache would serve repeats
    return torch.compile(model, backend="neuron", options={"cache": False})


def check_train(model: Any, ids: torch.Tensor) -> dict[str, str | None]:
    """One training step (loss with labels), compiled vs eager: the logits of the compiled forward
    graph ("forward") and every parameter's gradient ("grads"). Dropouts are 0, so train-mode logits
    are the model's forward; the inference graph is checked by :func:`check_generate`'s prefill."""
    model.train()
    model.zero_grad(set_to_none=True)
    out_e = model(ids, labels=ids)
    out_e.loss.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    out_c = _compile(model)(ids, labels=ids)
    out_c.loss.backward()
    errors: dict[str, str | None] = {"forward": None, "grads": None}
    try:
        torch.testing.assert_close(out_c.logits, out_e.logits, **FWD_TOL)
        torch.testing.assert_close(out_c.loss, out_e.loss, **FWD_TOL)
    except AssertionError as e:
        errors["forward"] = f"logits/loss: {e}"
    got = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    try:
        assert got.keys() == expected.keys(), f"grads differ in which params: {got.keys() ^ expected.keys()}"
        for n in expected:
            torch.testing.assert_close(got[n], expected[n], **GRAD_TOL, msg=lambda m, n=n: f"grad {n}: {m}")
    except AssertionError as e:
        errors["grads"] = str(e)
    model.zero_grad(set_to_none=True)
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


CHECKS: dict[str, Callable[[Any, torch.Tensor], dict[str, str | None]]] = {
    "train": check_train, "generate": check_generate,
}


def run_arch(arch: str, checks: tuple[str, ...] = tuple(CHECKS)) -> Result:
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
    ids = torch.randint(3, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    for name in checks:
        torch._dynamo.reset()
        try:
            outcome = CHECKS[name](model, ids)
        except Exception as e:  # noqa: BLE001 - a crash fails every column of this check
            if os.environ.get("ARCH_TRACEBACK"):
                traceback.print_exc()
            msg = f"{type(e).__name__}: {str(e)[:2000]}"
            outcome = {"forward": msg, "grads": msg} if name == "train" else {name: msg}
        for col, err in outcome.items():
            setattr(res, col, err is None)
            if err is not None:
                res.errors[col] = err[:2000]
    torch._dynamo.reset()
    res.fallbacks = dict(Counter(nc.fallback_ops) - before)
    res.seconds = time.perf_counter() - t0
    return res


def _mark(v: bool | None) -> str:
    return "-" if v is None else ("ok" if v else "FAIL")


def table(results: list[Result]) -> str:
    lines = ["| architecture | forward | grads | generate | fallback ops | seconds |",
             "|---|---|---|---|---|---|"]
    for r in results:
        fb = ", ".join(f"{k.replace('aten.', '')}×{v}" for k, v in sorted(r.fallbacks.items()))
        n = sum(r.fallbacks.values())
        lines.append(f"| {r.arch} | {_mark(r.forward)} | {_mark(r.grads)} | {_mark(r.generate)} | "
                     f"{n}{' (' + fb + ')' if fb else ''} | {r.seconds:.1f} |")
    passed = sum(r.ok for r in results)
    lines.append(f"\n{passed}/{len(results)} architectures pass all three checks.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated architectures (default: all)")
    ap.add_argument("--checks", default=",".join(CHECKS), help="comma-separated subset of checks")
    ap.add_argument("--json", action="store_true", help="print JSON rows instead of the table")
    ap.add_argument("--errors", action="store_true", help="print each failure's message")
    args = ap.parse_args(argv)
    import logging
    logging.getLogger("neuron_inductor").setLevel(logging.ERROR)  # fallbacks are in the table
    archs = args.only.split(",") if args.only else list(ARCHS)
    unknown = [a for a in archs if a not in ARCHS]
    if unknown:
        ap.error(f"unknown architecture(s) {unknown}; known: {', '.join(ARCHS)}")
    checks = tuple(args.checks.split(","))
    results = []
    for arch in archs:
        r = run_arch(arch, checks)
        results.append(r)
        print(f"{arch}: fwd={_mark(r.forward)} grads={_mark(r.grads)} gen={_mark(r.generate)} "
              f"fallbacks={r.fallbacks} {r.seconds:.1f}s", file=sys.stderr, flush=True)
        if args.errors:
            for k, v in r.errors.items():
                print(f"    {k}: {v[:600]}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps([dataclasses.asdict(r) | {"ok": r.ok} for r in results], indent=1))
    else:
        print(table(results))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
