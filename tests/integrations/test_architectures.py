"""Causal-LM architectures of the matrix (benchmarks/architectures.py) compiled vs eager on real
training inputs.

Per architecture, on a tiny random-weight model: one training step on a batch of two rows of 130
tokens (two 128-row tiles, not a multiple of 128) whose second row is padded on the left or on the
right (attention mask 0, labels -100), in float32 and bfloat16: logits, loss and every parameter's
gradient; and static-cache ``generate`` (same tokens, decode graph compiled once and reused; 64 new
tokens past the window for sliding-window models).

CI runs a small representative matrix (marked slow). ``NEURON_TEST_ALL_ARCHS=1`` runs every
architecture in both dtypes and both padding sides (what the README table shows).
"""
from __future__ import annotations

import functools
import importlib.util
import os
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "arch_checks.py"


def _load():
    mod = sys.modules.get("neuron_benchmarks_arch_checks")
    if mod is None:
        spec = importlib.util.spec_from_file_location("neuron_benchmarks_arch_checks", _PATH)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    return mod


A = _load()
FULL = bool(os.environ.get("NEURON_TEST_ALL_ARCHS"))

#: the small default matrix: GQA+RoPE (llama) in both dtypes, learned positions and MHA (gpt2),
#: a sliding window (mistral), softcapping + alternating sliding layers (gemma2) in bf16
_TRAIN = ([(a, d) for a in A.ARCHS for d in A.DTYPES] if FULL else
          [("llama", "float32"), ("llama", "bfloat16"), ("gpt2", "float32"), ("mistral", "float32"),
           ("gemma2", "bfloat16")])
#: generate: a plain model, two sliding-window models (64 tokens past the window), and a hybrid
#: linear-attention model (zero-width state slices: empty operands)
_GENERATE = list(A.ARCHS) if FULL else ["llama", "mistral", "gemma2", "qwen3_5_text"]


@functools.lru_cache(maxsize=None)
def _model(arch: str):
    return A.build(arch)


def _fallbacks_during(fn):
    from neuron_inductor import stats
    before = Counter(stats.fallback_ops())
    out = fn()
    return out, dict(Counter(stats.fallback_ops()) - before)


def _check_fallbacks(arch: str, fallbacks: dict) -> None:
    # an internal compiler error is caught and runs the graph eagerly: never acceptable here
    crashed = {op: n for op, n in fallbacks.items() if op.startswith("<whole")}
    assert not crashed, f"{arch}: the compiler failed on {crashed} (see the warning log)"
    allowed = A.allowed_fallbacks(arch)
    if allowed is not None:
        extra = {op: n for op, n in fallbacks.items() if op not in allowed}
        assert not extra, f"{arch} must not fall back on {extra}"


@pytest.mark.slow
@pytest.mark.parametrize("side", A.SIDES)
@pytest.mark.parametrize("arch,dtype", _TRAIN)
def test_padded_training_step(arch: str, dtype: str, side: str) -> None:
    torch._dynamo.reset()
    errors, fallbacks = _fallbacks_during(
        lambda: A.check_train(_model(arch), A.padded_batch(A.seq_for(arch), side), dtype))
    # "router-tie" (parts in "tied") / "bf16-noise": steps that pass a documented rerun (A.check_train)
    failed = {k: v for k, v in errors.items() if v and k not in ("router-tie", "tied", "bf16-noise")}
    assert not failed, f"{arch} {dtype} {side}-padded: " + "\n".join(f"{k}: {v}" for k, v in failed.items())
    _check_fallbacks(arch, fallbacks)


@pytest.mark.slow
@pytest.mark.parametrize("arch", _GENERATE)
def test_static_generate(arch: str) -> None:
    torch._dynamo.reset()
    model = _model(arch)
    n = A.GEN_TOKENS_SLIDING if A.is_sliding(model) else A.GEN_TOKENS
    prompt = A.padded_batch(A.GEN_PROMPT, "none")["input_ids"]
    errors, fallbacks = _fallbacks_during(lambda: A.check_generate(model, prompt, n))
    assert errors["generate"] is None, f"{arch}: {errors['generate']}"
    _check_fallbacks(arch, fallbacks)


def test_padded_batch_is_padded_as_documented() -> None:
    """The harness itself: pad positions are masked, labelled -100 and on the requested side."""
    left, right = A.padded_batch(130, "left"), A.padded_batch(130, "right")
    pad = int(130 * A.PAD_FRACTION)
    assert left["attention_mask"][1, :pad].eq(0).all() and left["attention_mask"][1, pad:].eq(1).all()
    assert right["attention_mask"][1, -pad:].eq(0).all() and right["attention_mask"][1, :-pad].eq(1).all()
    for b in (left, right):
        assert b["attention_mask"][0].eq(1).all()
        assert torch.equal(b["labels"].eq(-100), b["attention_mask"].eq(0))
        assert A.SEQ % 128 and A.SEQ > 128


def test_compare_catches_a_wrong_gradient() -> None:
    """A harness that cannot fail is a defect: _compare flags a small fp32 and a large bf16 error."""
    ref = torch.randn(64, 64)
    assert A._compare("g", ref, ref.clone(), None, A.GRAD_TOL) is None
    assert A._compare("g", ref * 1.01, ref, None, A.GRAD_TOL) is not None
    eager_bf16 = ref.bfloat16().float()
    assert A._compare("g", eager_bf16, eager_bf16, ref, A.GRAD_TOL) is None
    assert A._compare("g", eager_bf16 * 1.1, eager_bf16, ref, A.GRAD_TOL) is not None


def _route(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A top-2 router over 4 experts: the chosen experts' scores, gathered back per token."""
    scores = (x @ w).softmax(-1)
    top = torch.topk(scores, 2, dim=-1)
    return top.values * (top.indices.float() + 1)  # named fields, as routers use them


def _route_method(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """:func:`_route` spelled with ``Tensor.topk`` and keyword arguments (jetmoe, deepseek_v4's indexer)."""
    values, indices = (x @ w).softmax(-1).topk(k=2, dim=1)
    return values * (indices.float() + 1)


@pytest.mark.parametrize("route", [_route, _route_method])
def test_routing_pin_replays_the_reference_choice_in_compiled_code(route) -> None:
    """The pinned rerun is only sound if the compiled step really takes the recorded indices:
    record on one input, replay on another whose own top-2 differs, compiled and eager."""
    torch._dynamo.reset()
    x, w = torch.randn(6, 8), torch.randn(8, 4)
    A._PIN.__init__()
    expected_idx = torch.topk((x @ w).softmax(-1), 2, dim=-1)[1]
    with A._PIN.active("record"):
        route(x, w)
    assert len(A._PIN.indices) == 1 and torch.equal(A._PIN.indices[0], expected_idx)
    other = -x  # another routing for most tokens
    assert not torch.equal(torch.topk((other @ w).softmax(-1), 2, dim=-1)[1], expected_idx)
    scores = (other @ w).softmax(-1)
    want = scores.gather(-1, expected_idx) * (expected_idx.float() + 1)
    with A._PIN.active("replay"):
        eager = route(other, w)
    with A._PIN.active("replay"):
        compiled = torch.compile(route, backend="neuron", options={"cache": False})(other, w)
    assert torch.topk is A._TORCH_TOPK and not torch.overrides._is_torch_function_mode_enabled()
    torch.testing.assert_close(eager, want)
    torch.testing.assert_close(compiled, want)
    torch._dynamo.reset()


class _SplitRouter(torch.nn.Module):
    """jetmoe's router shape: ``topk`` of a linear layer's output cast to fp32, then the expert
    sizes through ``.tolist()`` (a graph break under Dynamo)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 4, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values, idx = self.layer(x).float().topk(2, dim=1)
        sizes = torch.zeros(x.shape[0], 4).scatter(1, idx, 1.0).sum(0).long().tolist()
        return values.softmax(1) * (idx.float() + 1) + sum(sizes)


def test_routing_pin_masks_replay_the_reference_choice_across_a_graph_break() -> None:
    """The "masks" technique (for routers the torch function mode cannot pin under Dynamo) really
    makes eager and compiled code take the recorded experts, with their own scores unchanged."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    ref, work = _SplitRouter(), _SplitRouter()
    work.load_state_dict(ref.state_dict())
    x = torch.randn(6, 8)
    other = -x  # another routing for most tokens
    A._PIN.__init__("masks")
    with A._PIN.active("record", ref):
        ref(x)
    assert A._PIN.masks_apply() and A._PIN.sources == ["layer"]
    expected_idx = A._PIN.indices[0]
    assert not torch.equal(work.layer(other).topk(2, dim=1).indices, expected_idx)
    scores = work.layer(other).detach()
    want = scores.gather(1, expected_idx).softmax(1) * (expected_idx.float() + 1) + 2 * x.shape[0]
    with torch.no_grad(), A._PIN.active("replay", work):
        eager = work(other)
    with torch.no_grad(), A._PIN.active("replay", work):
        compiled = torch.compile(work, backend="neuron", options={"cache": False})(other)
    assert not work.layer._forward_hooks  # the masks are gone after the replay
    # the model's own topk orders the two recorded experts by score: compare per token, unordered
    torch.testing.assert_close(eager.sort(1).values, want.sort(1).values)
    torch.testing.assert_close(compiled.sort(1).values, want.sort(1).values)
    assert A._PIN.scores["replay"][0].shape == (6, 4)  # eager's scores, for the near-tie count
    torch._dynamo.reset()


def test_routing_pin_counts_only_margins_within_bf16_noise() -> None:
    """A tie verdict needs a token whose reference k-th/(k+1)-th gap is within the runs' noise."""
    pin = A._RoutingPin()
    pin.calls = [(1, -1, True)]
    pin.scores["record"] = [torch.tensor([[0.50, 0.30, 0.20], [0.40, 0.399, 0.201]])]
    pin.scores["replay"] = [pin.scores["record"][0] + 0.001]  # uniform shift: noise 0.001
    assert pin.near_ties() == 1  # only the second token (gap 0.001 <= 3 * 0.001)
    pin.scores["replay"] = [pin.scores["record"][0].clone()]  # no noise: nothing can flip
    assert pin.near_ties() == 0


def test_eager_error_spread_does_not_loosen_a_well_conditioned_gradient() -> None:
    """The bf16 re-estimate of eager's error is a fair scale, not a loophole: for a weight matrix
    (a norm over many entries) it stays near this step's own error, so a gradient 10% off still
    fails against it."""
    model, batch = _model("llama"), A.padded_batch(40, "left")
    name = "model.layers.0.mlp.down_proj.weight"
    spread = A.eager_error_spread(model, batch, [name], draws=2)[name]
    work = A.copy.deepcopy(model).to(torch.bfloat16)
    _, ref = A._step(A.copy.deepcopy(work).float(), batch, False, None)
    _, eager = A._step(work, batch, False, None)
    single = A._rel(eager[name].float(), ref[name].float())
    assert 0.5 * single <= spread <= 1.5 * single, (spread, single)
    wrong = ref[name] * 1.1
    assert A._rel(wrong, ref[name]) > A.BF16_FACTOR * spread + A.BF16_FLOOR


@pytest.mark.slow
def test_eager_error_spread_of_a_cancelling_scalar_gradient() -> None:
    """Why the re-estimate exists: apertus' xIELU ``alpha_n`` gradient (layer 0) sums terms whose
    absolute values add up to ~90x the result; eager bf16 lands within 0.01% of fp32 on the
    right-padded step by luck, and at 0.07-4% on nearby ones."""
    model, batch = _model("apertus"), A.padded_batch(A.SEQ, "right")
    name = "model.layers.0.mlp.act_fn.alpha_n"
    work = A.copy.deepcopy(model).to(torch.bfloat16)
    _, ref = A._step(A.copy.deepcopy(work).float(), batch, False, None)
    _, eager = A._step(work, batch, False, None)
    single = A._rel(eager[name].float(), ref[name].float())
    assert single < 1e-3
    assert A.eager_error_spread(model, batch, [name])[name] > 10 * single


def test_nearby_batch_redraws_tokens_only_at_real_positions() -> None:
    """The problems of ``error_spread`` differ in their tokens, not in shapes or padding (the same
    compiled graphs run on all of them)."""
    batch = A.padded_batch(40, "left")
    near = A.nearby_batch(batch, 1)
    real = batch["attention_mask"] == 1
    assert torch.equal(near["attention_mask"], batch["attention_mask"])
    assert torch.equal(near["input_ids"][~real], batch["input_ids"][~real])
    assert torch.equal(near["labels"][~real], torch.full_like(near["labels"][~real], -100))
    assert torch.equal(near["labels"][real], near["input_ids"][real])
    assert (near["input_ids"][real] != batch["input_ids"][real]).float().mean() > 0.9
    assert not torch.equal(A.nearby_batch(batch, 2)["input_ids"], near["input_ids"])


@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="~200 s: runs with NEURON_TEST_ALL_ARCHS=1, like the full matrix")
def test_error_spread_of_a_cancelling_mask_scale_gradient() -> None:
    """doge's dynamic-mask scale ``A`` (layer 1, bf16, left padding): d loss / d A sums
    softplus(dt) times the mask gradient over every key, terms whose absolute values add up to ~1000x
    the result. Eager lands at 11% of fp32 on this step, the compiled step at 43% (its fused kernel
    sums the products in fp32 where eager rounds each to bf16 first); over independent problems
    both are at 25-40%. Judged on one sample, the cell failed."""
    torch._dynamo.reset()
    errors = A.check_train(_model("doge"), A.padded_batch(A.SEQ, "left"), "bfloat16")
    assert errors["grads"] is None and errors["fwd"] is None, errors
    assert "layers.1.self_attn.A" in (errors.get("bf16-noise") or ""), errors


def test_lowest_index_ties_is_the_compiled_topk_order() -> None:
    """The fp32 tie rerun's reference takes exact ties lowest index first, as the compiled
    ``topk`` does, for ``torch.topk`` and ``Tensor.topk``; it counts only finite k-th-place ties."""
    torch._dynamo.reset()
    x = torch.tensor([[0.5, 0.0, 0.0, 0.0, -0.2], [0.3, 0.0, 0.1, -0.1, 0.0],
                      [0.2, -float("inf"), 0.1, -float("inf"), -float("inf")]])
    compiled = torch.compile(lambda t: t.topk(3, dim=-1), backend="neuron", options={"cache": False})(x)
    seen: list[int] = []
    with A._lowest_index_ties(seen):
        by_method, by_function = x.topk(3, dim=-1), torch.topk(x, 3, dim=-1)
    assert torch.topk is A._TORCH_TOPK and torch.Tensor.topk is not by_method  # restored on exit
    want = torch.tensor([[0, 1, 2], [0, 2, 1], [0, 2, 1]])
    for got in (by_method, by_function, compiled):
        assert torch.equal(got.indices, want)
        torch.testing.assert_close(got.values, x.gather(-1, want))
    assert seen == [2, 2]  # rows 0 and 1 tie at 0.0 across the 3rd place; row 2's tie is -inf
    torch._dynamo.reset()


class _TopkModel(torch.nn.Module):
    """Logits that keep each row's top-2 of a score with exact zero ties (as a ReLU indexer has)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([1.0, 0.0, 0.0, 2.0]))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor):
        from types import SimpleNamespace
        scores = torch.relu(input_ids.float() - 1)
        idx = scores.topk(2, dim=-1).indices
        logits = torch.zeros(input_ids.shape).scatter(-1, idx, 1.0) * self.w
        return SimpleNamespace(logits=logits, loss=logits.square().sum())


def test_tie_rerun_passes_only_a_step_that_matches_the_other_tie_order() -> None:
    """The rerun passes a step equal to eager with ties taken lowest index first, keeps a wrong
    step failing, and has no verdict for a step whose ``topk`` had no exact tie."""
    model, ones = _TopkModel(), torch.ones(1, 4, dtype=torch.long)
    batch = {"input_ids": ones, "attention_mask": ones, "labels": ones}  # all scores 0: tied
    with A._lowest_index_ties([]):
        out, grads = A._step(model, batch, False, None)
    failed = {"fwd": "logits differ", "grads": None}
    verdict = A._rerun_lowest_index_ties(model, batch, out, grads, failed)
    assert verdict["fwd"] is None and verdict["grads"] is None and "router-tie" in verdict
    wrong = type(out)(logits=out.logits * 1.01, loss=out.loss)
    assert A._rerun_lowest_index_ties(model, batch, wrong, grads, failed) == {}
    untied = {**batch, "input_ids": torch.tensor([[4, 3, 1, 2]])}  # scores 3, 2, 0, 1
    with A._lowest_index_ties([]):
        out, grads = A._step(model, untied, False, None)
    assert A._rerun_lowest_index_ties(model, untied, out, grads, failed) == {}


def test_bf16_tie_rerun_judges_against_an_fp32_reference_with_the_same_ties() -> None:
    """In bf16 the rerun takes ties lowest index first in eager bf16 and in its fp32 reference, and
    judges by the bf16 criterion (error vs fp32 within BF16_FACTOR x eager's): a compiled step of
    that tie order passes, one with a 10% error does not (jetmoe's zero-embedding pad tokens)."""
    model, ones = _TopkModel().bfloat16(), torch.ones(1, 4, dtype=torch.long)
    batch = {"input_ids": ones, "attention_mask": ones, "labels": ones}
    with A._lowest_index_ties([]):
        out, grads = A._step(model, batch, False, None)
    failed = {"fwd": None, "grads": "1/1 parameters wrong"}
    verdict = A._rerun_lowest_index_ties(model, batch, out, grads, failed, bf16=True)
    assert verdict["grads"] is None and verdict["tied"] == "grads" and "exact topk ties" in verdict["router-tie"]
    off = {n: g * 1.1 for n, g in grads.items()}
    assert A._rerun_lowest_index_ties(model, batch, out, off, failed, bf16=True) == {}
    assert model.w.dtype == torch.bfloat16  # the fp32 reference ran on a copy


def test_drop_zero_only_keeps_real_gradient_differences() -> None:
    got = {"a": torch.zeros(3), "b": torch.ones(2), "c": torch.ones(1)}
    exp = {"c": torch.ones(1)}
    A._drop_zero_only(got, exp)
    assert set(got) == {"b", "c"} and set(exp) == {"c"}  # "b" still differs: a real failure


def test_zero_hash_route_tables_get_distinct_experts() -> None:
    """A zero ``tid2eid`` routes every token to expert 0 in every slot (constant weights 1/k)."""
    router = torch.nn.Module()
    router.num_experts = 4
    router.register_buffer("tid2eid", torch.zeros(50, 2, dtype=torch.long))
    A._untie_hash_routes(router, torch.Generator().manual_seed(0))
    t = router.tid2eid
    assert t.min() >= 0 and t.max() < 4 and bool((t[:, 0] != t[:, 1]).all()) and t.unique().numel() == 4


def test_pinned_rerun_passes_as_noise_only_when_every_failure_is_noise(monkeypatch) -> None:
    """An MoE step whose failing bf16 gradients fail pinned as well is judged by the pinned error
    spread: "bf16-noise" (ok*) only if the spread passes every one of them; a gradient that passed
    by pinning alone still needs near-tie tokens; a pinned failure stays a failure."""
    def rerun(noisy: set[str], grads: str | None):
        def fake_check_train(*args, **kwargs):
            A._PIN.__init__()
            A._PIN.indices.append(torch.zeros(1, dtype=torch.long))
            A._PIN.noisy |= noisy
            out = {"fwd": None, "grads": grads, "pinned": "1 topk calls pinned, 0 near-tie tokens"}
            if noisy:
                out["bf16-noise"] = "grad a: spread ok"
            return out
        monkeypatch.setattr(A, "check_train", fake_check_train)
        monkeypatch.setattr(A._PIN, "near_ties", lambda: 0)
        failed = {"fwd": None, "grads": "grad a wrong; grad b wrong"}
        return A._rerun_pinned(None, {}, failed, {"a", "b"})
    passed = rerun({"a", "b"}, None)
    assert passed["grads"] is None and "bf16-noise" in passed and "router-tie" not in passed
    assert rerun({"a"}, None)["grads"] is not None  # b passed pinned only, and no near-tie token
    assert rerun(set(), "grad a wrong")["grads"] is not None


def test_bf16_cast_keeps_the_strict_fp32_modules() -> None:
    """bf16 rows are built as ``from_pretrained(dtype=bfloat16)`` builds them: a class's
    ``_keep_in_fp32_modules_strict`` stay float32 (inkling2's router computes in fp32 on purpose;
    cast whole, eager itself fails), matched on whole name components only."""
    class Block(torch.nn.Module):
        _keep_in_fp32_modules_strict = ["mlp.gate.weight"]

        def __init__(self) -> None:
            super().__init__()
            self.mlp = torch.nn.Module()
            self.mlp.gate = torch.nn.Linear(4, 4)
            self.mlp.up = torch.nn.Linear(4, 4)
            self.other_mlp = torch.nn.Module()
            self.other_mlp.gate = torch.nn.Linear(4, 4)

    m = A.to_bf16(Block())
    assert m.mlp.gate.weight.dtype == torch.float32
    assert m.mlp.gate.bias.dtype == m.mlp.up.weight.dtype == m.other_mlp.gate.weight.dtype == torch.bfloat16
