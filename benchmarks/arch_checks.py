"""The checks of the causal-LM architecture matrix (a helper module: no script of its own).

``benchmarks/architectures.py`` (the script) prints the matrix from these checks;
``tests/integrations/test_architectures.py``, ``bf16_spread.py``, ``router_drift.py`` and
``discover_causal_lms.py`` call them too. What is checked:

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
error may be at most ``BF16_FACTOR`` times eager bfloat16's own error (plus a small floor). Reruns
of a failing step (``check_train``): a step whose ``topk`` calls had exact ties is compared with
eager taking tied values lowest index first ("tie" in the table); a bf16 MoE step is rerun with
routing pinned to the fp32 reference ("tie"), and a failing bf16 gradient is judged by the compiled
and eager rms errors over this and nearby independent problems instead of this step's single
samples ("ok*": ``error_spread``).
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
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

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # also importable by path (tests/integrations/test_architectures.py)
    sys.path.insert(0, _HERE)

import arch_configs as _cfg  # noqa: E402
import routing_pin as _rp  # noqa: E402

# the matrix's architectures, re-exported for the tests and scripts
ARCHS, COMMON, CORE, MOE, MOE_BATCHED = _cfg.ARCHS, _cfg.COMMON, _cfg.CORE, _cfg.MOE, _cfg.MOE_BATCHED
SLIDING_WINDOW, VOCAB, SHORT_SEQ = _cfg.SLIDING_WINDOW, _cfg.VOCAB, _cfg.SHORT_SEQ
allowed_fallbacks, build, is_sliding, tiny_config = _cfg.allowed_fallbacks, _cfg.build, _cfg.is_sliding, \
    _cfg.tiny_config
_untie_hash_routes = _cfg._untie_hash_routes

BATCH, SEQ = 2, 130
#: the padded row loses this fraction of its tokens to padding
PAD_FRACTION = 1 / 3
GEN_TOKENS, GEN_TOKENS_SLIDING, GEN_PROMPT = 4, 64, 16
#: fp32 everywhere; only summation order differs (attention/softmax/norms), so a loose-ish fp32 bound
FWD_TOL = dict(rtol=1e-4, atol=1e-4)
GRAD_TOL = dict(rtol=1e-3, atol=1e-4)
#: bf16: compiled error vs the fp32 reference <= BF16_FACTOR * eager bf16's error + BF16_FLOOR
BF16_FACTOR, BF16_FLOOR = 2.0, 1e-3
#: a failing bf16 gradient's compiled and eager errors are re-estimated over this many nearby problems
#: (see ``error_spread``); each draws fresh tokens at the batch's real positions and perturbs every
#: weight by a relative U(-BF16_JITTER, BF16_JITTER)
BF16_DRAWS, BF16_JITTER = 4, 2.0 ** -8
DTYPES = ("float32", "bfloat16")
SIDES = ("right", "left")

def column(dtype: str, side: str) -> str:
    return f"{'fp32' if dtype == 'float32' else 'bf16'} {side}"


@dataclasses.dataclass
class Result:
    arch: str
    #: per (dtype, padding side) column: {"fwd": ok, "grads": ok}; None = not run
    train: dict[str, dict[str, bool]] = dataclasses.field(default_factory=dict)
    generate: bool | None = None
    gen_tokens: int = 0
    #: said after the token count in the table (a model without a KV cache)
    gen_note: str = ""
    fallbacks: dict[str, int] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    errors: dict[str, str] = dataclasses.field(default_factory=dict)
    #: columns whose step matched only with routing pinned or exact ties reordered (see
    #: ``check_train``): the original failure
    ties: dict[str, str] = dataclasses.field(default_factory=dict)
    #: per such column, which parts ("fwd", "grads") had failed
    tied: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    #: columns where some bf16 grads passed only against eager's error over nearby draws
    #: (``error_spread``): those parameters' single-step errors
    noise: dict[str, str] = dataclasses.field(default_factory=dict)

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


def to_bf16(model: Any) -> Any:
    """``model`` in bfloat16 the way ``from_pretrained(..., dtype=torch.bfloat16)`` loads it: the
    parameters and buffers its class lists in ``_keep_in_fp32_modules_strict`` stay float32 (routers
    that compute in fp32 on purpose, e.g. inkling2's gate: cast whole, eager itself fails)."""
    import re
    model.to(torch.bfloat16)
    keep = sorted(set(getattr(model, "_keep_in_fp32_modules_strict", None) or ()))
    if keep:
        pattern = re.compile(r"(^|\.)(" + "|".join(map(re.escape, keep)) + r")($|\.)")
        for name, t in [*model.named_parameters(), *model.named_buffers()]:
            if t.is_floating_point() and pattern.search(name):
                t.data = t.data.float()
    return model


def _rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.detach().double(), ref.detach().double()
    return float((x - ref).norm() / ref.norm().clamp_min(1e-12))


def _compare(name: str, got: torch.Tensor, expected: torch.Tensor, ref: torch.Tensor | None,
             tol: dict) -> str | None:
    """None when ``got`` matches: fp32 (``ref`` None) elementwise within ``tol``, NaN where eager has
    NaN (gemma3n_text's eager gradients are NaN on a padded batch: ``mean(h**2) ** 0.5`` of a zero
    pad row); bf16 by error against the fp32 ``ref`` no worse than BF16_FACTOR x eager bf16's own
    (+ BF16_FLOOR)."""
    if ref is None:
        try:
            torch.testing.assert_close(got, expected, equal_nan=True, **tol)
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


_rp.RoutingPin.noise_factor = BF16_FACTOR   # near ties: within the noise the bf16 check allows
_RoutingPin, _PIN, _TORCH_TOPK = _rp.RoutingPin, _rp.PIN, _rp.TORCH_TOPK
_lowest_index_ties = _rp.lowest_index_ties


def check_train(model: Any, batch: dict, dtype: str = "float32",
                cache_dir: str | None = None, pin_routing: bool | str = False) -> dict[str, str | None]:
    """One training step on ``batch`` (loss with labels), compiled vs eager, in ``dtype``: logits
    and loss ("fwd") and every parameter's gradient ("grads"). Dropouts are 0.

    A bf16 step whose logits or gradients differ and that routes with ``topk`` is run again with
    its routing pinned to the fp32 reference's choices (:class:`_RoutingPin`). If that run matches
    and the reference has tokens whose top-k margin is within bf16 noise (so a correct bf16 run
    can route them otherwise), the failing parts are reported under "router-tie" (a near-tie routed
    the other way, not a wrong number; "tied" names them) instead of failing. In a bf16 step
    without ``topk`` routing, a failing gradient whose compiled rms error over this and nearby problems is within BF16_FACTOR x
    eager's rms error over the same problems (:func:`error_spread`) passes and is listed under
    "bf16-noise". A failing fp32 step is compared once more against eager with exact ``topk`` ties
    taken lowest index first (:func:`_rerun_lowest_index_ties`); a failing bf16 step too, before
    its pinned rerun (an exact tie is the narrower explanation). ``pin_routing`` True or a
    technique name (:class:`_RoutingPin`) runs this step pinned."""
    model.train()
    ref = ref_grads = None
    routing = _routing(pin_routing)
    if dtype == "bfloat16":
        work = to_bf16(copy.deepcopy(model))
        exact = copy.deepcopy(work).float()  # fp32 reference with the same (rounded) weights
        with routing("record", exact):
            ref, ref_grads = _step(exact, batch, False, None)
        del exact
    else:
        work = model
    with routing("replay", work):
        out_e, exp_grads = _step(work, batch, False, None)
    with routing("replay", work):
        out_c, got_grads = _step(work, batch, True, cache_dir)
    _drop_zero_only(got_grads, exp_grads)
    errors: dict[str, str | None] = {"fwd": None, "grads": None}
    bad: dict[str, str] = {}   # gradient name -> why it fails
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
        bad = {n: e for n in exp_grads if (e := _compare(
            f"grad {n}", got_grads[n].float(), exp_grads[n].float(),
            None if ref_grads is None else ref_grads[n].float(), GRAD_TOL))}
        routed = ref_grads is not None and not pin_routing and bool(bad) and _uses_topk(work, batch)
        if bad and ref_grads is not None and (pin_routing or not routed):
            first = {n: (_rel(exp_grads[n].float(), ref_grads[n].float()),
                         _rel(got_grads[n].float(), ref_grads[n].float())) for n in bad}
            pinned = dict(vars(_PIN))  # the spread re-pins every draw; this step's pins are reported
            spread = error_spread(model, batch, list(bad), cache_dir=cache_dir, first=first,
                                  pin=pin_routing)
            vars(_PIN).update(pinned)
            noisy = []
            for n in list(bad):
                e_rms, c_rms = spread[n]
                if c_rms <= BF16_FACTOR * e_rms + BF16_FLOOR:
                    _PIN.noisy.add(n)
                    noisy.append(f"{bad.pop(n)}; rms over {BF16_DRAWS + 1} problems: compiled "
                                 f"{c_rms:.3g}, eager {e_rms:.3g}")
            if noisy:
                errors["bf16-noise"] = "; ".join(noisy)
        if bad:
            errors["grads"] = (f"{len(bad)}/{len(exp_grads)} parameters wrong: "
                               + "; ".join(list(bad.values())[:4]))
    if not pin_routing and (errors["fwd"] or errors["grads"]):
        errors.update(_rerun_lowest_index_ties(work, batch, out_c, got_grads, errors, ref is not None))
    if pin_routing:
        how = " (by masking their inputs' source modules)" if _PIN.technique == "masks" else ""
        errors["pinned"] = f"{len(_PIN.indices)} topk calls pinned{how}, {_PIN.near_ties()} near-tie tokens"
    elif (errors["grads"] or errors["fwd"]) and dtype == "bfloat16" and _uses_topk(work, batch):
        errors.update(_rerun_pinned(model, batch, errors, set(bad)))
    return errors


def _routing(pin: bool | str) -> Callable[[str, Any], Any]:
    """The context for a step's record / replay: a fresh :data:`_PIN` with ``pin``'s technique
    (True: "mode"), or nothing when ``pin`` is False."""
    if not pin:
        return lambda _mode, _model: contextlib.nullcontext()
    _PIN.__init__("mode" if pin is True else pin)
    return _PIN.active


def _drop_zero_only(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    """Drop gradients that exist in one run only and are exactly zero there.

    A parameter that reaches the loss only through a non-differentiable output (``topk`` indices)
    gets no gradient eagerly, but an exact-zero one from torch.compile's AOTAutograd when it flows
    through an in-place write into a buffer (stock ``aot_eager`` does the same): the same number."""
    for n in a.keys() ^ b.keys():
        g = a.get(n, b.get(n))
        if not bool(g.any()):
            a.pop(n, None)
            b.pop(n, None)


def _rerun_lowest_index_ties(model: Any, batch: dict, out_c: Any, got_grads: dict,
                             errors: dict[str, str | None], bf16: bool = False) -> dict[str, str | None]:
    """A failed step compared again with eager's tied ``topk`` values taken lowest index first
    (in bf16, in the fp32 reference too: ``model`` is the bf16 model then).

    That reference is as valid a torch result as the first, so a compiled step matching it is
    correct; it passes under "router-tie" only if some ``topk`` call had an exact tie at its k-th
    place (otherwise both references agree and the failure stands). Exact ties are common where
    a pad token's embedding row is zero (``padding_idx``): its router scores all tie."""
    seen: list[int] = []
    ref = ref_grads = None
    try:
        with _lowest_index_ties(seen):
            if bf16:
                ref, ref_grads = _step(copy.deepcopy(model).float(), batch, False, None)
            out_e, exp_grads = _step(model, batch, False, None)
    except Exception:  # noqa: BLE001 - a rerun that cannot run keeps the original failure
        return {}
    if not sum(seen):
        return {}
    _drop_zero_only(got_grads, exp_grads)
    wrong = [p for p in (_compare("logits", out_c.logits.float(), out_e.logits.float(),
                                  None if ref is None else ref.logits.float(), FWD_TOL),
                         _compare("loss", out_c.loss.float(), out_e.loss.float(),
                                  None if ref is None else ref.loss.float(), FWD_TOL)) if p]
    if got_grads.keys() != exp_grads.keys():
        wrong.append(f"grads differ in which params: {sorted(got_grads.keys() ^ exp_grads.keys())}")
    wrong += [e for n in exp_grads if n in got_grads and (e := _compare(
        f"grad {n}", got_grads[n].float(), exp_grads[n].float(),
        None if ref_grads is None else ref_grads[n].float(), GRAD_TOL))]
    if wrong:  # the failure stands as first reported
        return {}
    failure = "; ".join(v for v in (errors["fwd"], errors["grads"]) if v)
    return {"fwd": None, "grads": None, "tied": _tied(errors),
            "router-tie": f"{failure} [matches eager with exact topk ties ({sum(seen)} rows over "
                          f"{len(seen)} calls) taken lowest index first]"}


def nearby_batch(batch: dict, seed: int) -> dict[str, torch.Tensor]:
    """``batch`` with fresh random tokens at its real positions: the same shapes, attention mask and
    padding (so the same compiled graphs run), labels the new ids there and -100 at padding."""
    mask = batch["attention_mask"]
    ids = torch.randint(3, VOCAB, mask.shape, generator=torch.Generator().manual_seed(10_000 + seed))
    ids = ids.masked_fill(mask == 0, COMMON["pad_token_id"])
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def error_spread(model: Any, batch: dict, names: list[str], draws: int = BF16_DRAWS,
                 cache_dir: str | None = None, compiled: bool = True,
                 first: dict[str, tuple[float, float]] | None = None, pin: bool | str = False
                 ) -> dict[str, tuple[float, float | None]]:
    """The bf16 gradient errors of ``names`` as (eager rms, compiled rms) over this step and
    ``draws`` nearby, independent problems: fresh tokens at the batch's real positions
    (:func:`nearby_batch`) and every weight times 1 + U(-BF16_JITTER, BF16_JITTER), each problem
    with its own fp32 reference, each error measured as in :func:`_compare`. ``first`` holds this
    step's (eager, compiled) errors when already measured; ``compiled=False`` measures eager only.

    One step's error of a matrix gradient is a norm over many entries and barely changes from
    problem to problem, but a gradient with few entries that sums heavily cancelling terms (a
    scalar activation parameter, a per-head mask scale) has a single-sample error: which of the
    terms' bf16 roundings happen to cancel decides it, so eager lands within 0.01% on one step and
    at 2-40% on the next, and a computation that rounds some intermediates differently (a fused
    kernel keeps a bf16 product in fp32 until its reduction) lands elsewhere by the same luck.
    Only the two error distributions compare fairly: the same problems for both, tokens redrawn so
    that the rounding pattern changes (a one-ulp weight jitter alone keeps most of it). A precision
    bug is wrong on every problem, so it still shows in the compiled rms. With ``pin`` (an MoE
    step) every problem's eager and compiled runs route as its fp32 reference (:class:`_RoutingPin`),
    so a near-tie token routed elsewhere does not count as rounding error."""
    errs: dict[str, list[tuple[float, float | None]]] = {n: [] for n in names}
    probe = compiled_probe = None
    for d in range(draws + 1):
        if d == 0 and first is not None:
            for n in names:
                errs[n].append(first[n])
            continue
        base, step_batch = copy.deepcopy(model), batch
        if d:
            step_batch = nearby_batch(batch, d)
            gen = torch.Generator().manual_seed(d)
            with torch.no_grad():
                for p in base.parameters():
                    p.mul_(1 + (torch.rand(p.shape, generator=gen) * 2 - 1) * BF16_JITTER)
        work = to_bf16(base)
        routing = _routing(pin)
        exact = copy.deepcopy(work).float()
        with routing("record", exact):
            _, ref = _step(exact, step_batch, False, None)
        del exact
        with routing("replay", work):
            _, got = _step(work, step_batch, False, None)
        comp = None
        if compiled:
            if probe is None:  # one module, reloaded per draw: every draw runs the same graphs
                probe = copy.deepcopy(work)
                compiled_probe = _compile(probe, cache_dir)
            with torch.no_grad():
                for p, q in zip(probe.parameters(), work.parameters()):
                    p.copy_(q)
            with routing("replay", probe):
                _, comp = _step(compiled_probe, step_batch, False, None)
            comp = {k.replace("_orig_mod.", ""): v for k, v in comp.items()}
        for n in names:
            errs[n].append((_rel(got[n].float(), ref[n].float()),
                            None if comp is None else _rel(comp[n].float(), ref[n].float())))
    rms = lambda v: (sum(e * e for e in v) / len(v)) ** 0.5  # noqa: E731
    return {n: (rms([e for e, _ in v]), rms([c for _, c in v]) if compiled else None)
            for n, v in errs.items()}


def eager_error_spread(model: Any, batch: dict, names: list[str],
                       draws: int = BF16_DRAWS) -> dict[str, float]:
    """Eager bf16's rms gradient error for ``names`` over this step and ``draws`` nearby problems
    (:func:`error_spread` without the compiled runs)."""
    return {n: e for n, (e, _) in error_spread(model, batch, names, draws, compiled=False).items()}


def _uses_topk(model: Any, batch: dict) -> bool:
    """Whether a forward of ``model`` routes with ``torch.topk`` (those failures go to the
    pinned-routing rerun instead)."""
    _PIN.__init__()
    with torch.no_grad(), _PIN.active("record"):
        model(**batch)
    return bool(_PIN.indices)


def _rerun_pinned(model: Any, batch: dict, errors: dict[str, str | None],
                  bad: set[str]) -> dict[str, str | None]:
    """The pinned-routing rerun of a failed bf16 step (see :func:`check_train`): its verdict.

    Gradients ``bad`` that fail pinned as well but pass by their pinned error spread are bf16
    noise, not routing: when that holds for all of them (and the forward passed) the step passes
    as "bf16-noise" ("ok*"); when only some, the rest passed by pinning alone and need near-tie
    tokens as usual."""
    failure = "; ".join(v for v in (errors["fwd"], errors["grads"]) if v)
    part = "grads" if errors["grads"] else "fwd"  # where a failed rerun's reason is reported
    torch._dynamo.reset()
    try:
        again = check_train(model, batch, "bfloat16", None, pin_routing=True)
    except Exception as e:  # noqa: BLE001 - a rerun that cannot run keeps the original failure
        if not _PIN.masks_apply():
            return {part: f"{failure} (pinned-routing rerun failed: {type(e).__name__}: {e})"}
        torch._dynamo.reset()  # the mode cannot pin this model; its routers' sources can be masked
        try:
            again = check_train(model, batch, "bfloat16", None, pin_routing="masks")
        except Exception as e2:  # noqa: BLE001
            return {part: f"{failure} (pinned-routing reruns failed: {type(e).__name__}: {e}; "
                          f"masks: {type(e2).__name__}: {e2})"}
    finally:
        torch._dynamo.reset()
    if not _PIN.indices:  # no topk routing: nothing a tie could explain
        return {}
    if again["grads"] is not None or again["fwd"] is not None:
        return {part: f"{failure} (with routing pinned as well: {again['grads'] or again['fwd']})"}
    if again.get("bf16-noise") and not errors["fwd"] and bad and bad <= _PIN.noisy:
        return {"bf16-noise": f"{again['bf16-noise']} [routing pinned: {again['pinned']}]", "grads": None}
    if not _PIN.near_ties():
        return {part: f"{failure} (matches with routing pinned, but no token's top-k margin is "
                      "within bf16 noise, so a tie cannot explain it)"}
    return {"router-tie": f"{failure} [{again['pinned']}]", "tied": _tied(errors), "fwd": None,
            "grads": None}


def _tied(errors: dict[str, str | None]) -> str:
    """The parts ("fwd", "grads") of a step that failed and passed only as a routing tie."""
    return ",".join(k for k in ("fwd", "grads") if errors[k])


def check_generate(model: Any, ids: torch.Tensor, max_new_tokens: int = 4) -> dict[str, str | None]:
    """Static-cache greedy generation on a compiled forward: same tokens, same logits at every step,
    and no compile after the first decode step (prefill and decode are one graph each). Two kinds
    of model compile more and pass with a note: one without a static KV cache (:func:`growing_cache`),
    and one whose shapes depend on Python numbers read from tensor data (jetmoe's
    ``expert_size.tolist()``), which must get exactly one warning naming the cause and the fix
    (``neuron_inductor.data_dependent``)."""
    import warnings
    from neuron_inductor import data_dependent
    from neuron_inductor.integrations.hf import compile_forward, restore_forward, static_generate
    model.eval()
    # min_new_tokens: an early EOS would leave too few decode steps to prove the decode graph is reused
    kw = dict(output_logits=True, return_dict_in_generate=True, min_new_tokens=max_new_tokens)
    with torch.no_grad():  # the reference is transformers' own static-cache path, eagerly
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                  do_sample=False, cache_implementation="static", **kw)
    probe = compile_forward(model, options={"cache": False})
    data_dependent.reset()
    failures_before = {code: len(r) for code, r in torch._dynamo.utils.guard_failures.items()}
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            got = static_generate(model, ids, max_new_tokens, **kw)
    finally:
        restore_forward(model)
    warned = [w for w in seen if "read from tensor data" in str(w.message)]
    note = tie = ""
    try:
        try:
            _same_generation(got, expected)
        except AssertionError as first:
            ties = _generate_with_lowest_index_ties(model, ids, max_new_tokens, kw)
            if ties is None:
                raise
            try:
                _same_generation(got, ties[0])
            except AssertionError:
                raise first from None
            note = "tie"
            tie = (f"{str(first).splitlines()[0]} [matches eager with exact topk ties "
                   f"({sum(ties[1])} rows over {len(ties[1])} calls) taken lowest index first]")
        assert len(probe.graphs_after) == max_new_tokens, probe.graphs_after
        growing = growing_cache(model, expected)
        recompiles_ok = bool(growing)
        if growing:
            note = f"{growing}: a graph per length" + (f"; {note}" if note else "")
        elif probe.decode_recompiles() and len(warned) == 1:
            recompiles_ok = True
            note = "shapes from tensor data (.tolist()): a graph per value, one warning" + \
                (f"; {note}" if note else "")
        elif probe.decode_recompiles() == 1 and _state_strides_changed(failures_before):
            recompiles_ok = True
            note = "1 recompile: state strides (eager too)" + \
                (f"; {note}" if note else "")
        assert probe.decode_recompiles() == 0 or recompiles_ok, \
            f"decode steps recompiled: Dynamo graphs after each call {probe.graphs_after}" + \
            (f" ({len(warned)} data-dependence warnings)" if warned else " (no warning)")
    except AssertionError as e:
        return {"generate": str(e)}
    return {"generate": None, "note": note, "router-tie": tie}


def _state_strides_changed(before: dict) -> bool:
    """Whether a guard failure since ``before`` (counts of Dynamo's recorded failures per code
    object) is a stride mismatch of a tensor the model keeps on a module. recurrent_gemma keeps its
    convolution state on the layer: prefill stores a padded (contiguous) tensor, decode a slice of
    a concatenation (``conv_state[:, :, 1:]``), eagerly as well, so the second decode step meets
    a stride guard of the first and compiles once more; the decode graph is stable after that."""
    new = [r for code, reasons in torch._dynamo.utils.guard_failures.items()
           for r in reasons[before.get(code, 0):]]
    return any("stride mismatch" in r and "self._modules[" in r for r in new)


def _same_generation(got: Any, expected: Any) -> None:
    for i, (a, b) in enumerate(zip(got.logits, expected.logits)):
        torch.testing.assert_close(a, b, **FWD_TOL, msg=lambda m, i=i: f"logits of step {i}: {m}")
    assert torch.equal(got.sequences, expected.sequences), \
        f"tokens differ:\n{got.sequences}\nvs eager\n{expected.sequences}"


def _generate_with_lowest_index_ties(model: Any, ids: torch.Tensor, max_new_tokens: int,
                                     kw: dict) -> tuple[Any, list[int]] | None:
    """Eager's static-cache generation again with tied ``topk`` values taken lowest index first (the
    order the compiler documents), and the tie counts per call; None when no ``topk`` call had an
    exact tie at its k-th place (the two references then agree and a failure stands)."""
    seen: list[int] = []
    try:
        with torch.no_grad(), _lowest_index_ties(seen):
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                 do_sample=False, cache_implementation="static", **kw)
    except Exception:  # noqa: BLE001 - a rerun that cannot run keeps the original failure
        return None
    return (out, seen) if sum(seen) else None


def growing_cache(model: Any, out: Any) -> str:
    """Why eager ``generate(cache_implementation="static")`` (output ``out``) of ``model`` ran
    without a static KV cache; "" when it had one. A model whose forward takes no cache
    (openai-gpt: generate builds one it never reads) re-reads the whole sequence, one token longer,
    at every decode step, and one with a cache class of its own feeds growing state (MiniMax's
    dynamic ``MiniMaxCache``): each step is a new shape, so a graph per step is the model's own
    cost and generate checks only tokens and logits for it."""
    import inspect
    from transformers.cache_utils import StaticCache
    if not {"cache", "past_key_values"} & set(inspect.signature(model.forward).parameters):
        return "no KV cache"
    cache = getattr(out, "cache", None)
    return "" if isinstance(cache, StaticCache) else f"its own {type(cache).__name__} cache"


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
             sides: tuple[str, ...] = SIDES, seq: int | None = None) -> Result:
    """Every check on a fresh tiny model; a failing check is recorded and the next still runs.
    ``seq`` None: the row's training length (:func:`seq_for`)."""
    seq = seq_for(arch, seq)
    from neuron_inductor import stats
    res = Result(arch)
    t0 = time.perf_counter()
    before = Counter(stats.fallback_ops())
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
                    tie, tied = out.pop("router-tie", None), out.pop("tied", None)
                    if tie:
                        res.ties[col] = tie[:2000]
                        res.tied[col] = (tied or "grads").split(",")
                    noise = out.pop("bf16-noise", None)
                    if noise:
                        res.noise[col] = noise[:2000]
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
            if out.get("note"):
                res.gen_note = f", {out['note']}"
            if out.get("router-tie"):
                res.ties["generate"] = out["router-tie"][:2000]
            res.generate = err is None
            if err is not None:
                res.errors["generate"] = err[:2000]
    torch._dynamo.reset()
    res.fallbacks = dict(Counter(stats.fallback_ops()) - before)
    res.seconds = time.perf_counter() - t0
    return res


def seq_for(arch: str, seq: int | None = None) -> int:
    """The training length of ``arch``: ``seq`` if given, else SEQ (SHORT_SEQ for the few rows whose
    tracing cost grows with every position, see arch_configs)."""
    return seq if seq is not None else SHORT_SEQ.get(arch, SEQ)
