"""The Dynamo-level tier: a warm hit skips AOTAutograd; the key moves with everything that changes the
compiled code and with nothing else; graph kinds it cannot serve safely bypass (counted) and stay
correct."""
import hashlib
import json
import warnings

import pytest
import torch

from neuron_inductor.cache import (NeuronCacheWarning, Store, clear_memory, dynamo, key_of, reset_stats,
                                   stats)
from neuron_inductor.config import get_config


def capture(fn, *args, **compile_kw):
    """The (graph, example inputs) Dynamo hands a backend for ``fn(*args)``."""
    seen = []

    def backend(gm, example_inputs):
        seen.append((gm, list(example_inputs)))
        return gm.forward
    torch._dynamo.reset()
    torch.compile(fn, backend=backend, dynamic=False, **compile_kw)(*args)
    torch._dynamo.reset()
    (graph,) = seen
    return graph


def key(fn, *args, cfg=None, **kw):
    gm, ex = capture(fn, *args, **kw)
    return key_of(dynamo.make_record(gm, ex, cfg or get_config()))


def f(x, w):
    return torch.relu(x @ w).sum(-1)


X, W = torch.randn(4, 8), torch.randn(8, 16)


def test_key_changes_with_what_changes_the_code():
    base = key(f, X, W)
    assert key(f, X.clone(), W.clone() * 3) == base                    # values: same key
    assert key(lambda x, w: torch.relu(x @ w).sum(-1), X, W) == base   # another function object
    assert key(lambda x, w: torch.sigmoid(x @ w).sum(-1), X, W) != base   # graph
    assert key(f, torch.randn(5, 8), W) != base                        # shape
    assert key(f, X.double(), W.double()) != base                      # dtype
    assert key(f, X, torch.randn(16, 8).t()) != base                   # strides
    with torch.no_grad():
        assert key(f, X, W.requires_grad_()) != base                   # requires_grad
    W.requires_grad_(False)
    assert key(f, X, W, cfg=get_config().replace(target="trn1")) != key(f, X, W, cfg=get_config().replace(target="trn2"))
    code_opts = [k for k in get_config().code_affecting() if isinstance(getattr(get_config(), k), bool)]
    if code_opts:
        opt = code_opts[0]
        assert key(f, X, W, cfg=get_config().replace(**{opt: not getattr(get_config(), opt)})) != base
    with torch.no_grad():
        assert key(f, X, W) != base                                    # grad mode
    old = torch._functorch.config.functionalize_rng_ops
    try:
        torch._functorch.config.functionalize_rng_ops = not old        # RNG state handling
        assert key(f, X, W) != base
    finally:
        torch._functorch.config.functionalize_rng_ops = old
    torch.use_deterministic_algorithms(True)
    try:
        assert key(f, X, W) != base
    finally:
        torch.use_deterministic_algorithms(False)


def test_key_changes_with_versions(monkeypatch):
    base = key(f, X, W)
    from neuron_inductor.cache import schema
    pinned = dict(schema.package_fingerprint(), source_sha256="0" * 64)
    monkeypatch.setattr(dynamo, "package_fingerprint", lambda: pinned)
    assert key(f, X, W) != base
    monkeypatch.undo()
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    assert key(f, X, W) != base


def test_autocast_bypasses():
    gm, ex = capture(f, X, W)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.raises(dynamo.Bypass, match="autocast"):
            dynamo.make_record(gm, ex, get_config())


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))) * 2


def run_fresh(model, x):
    """A new process as far as both cache tiers and Dynamo know."""
    torch._dynamo.reset()
    clear_memory()
    with torch.no_grad():
        return torch.compile(model, backend="neuron")(x)


@pytest.mark.smoke
def test_warm_hit_skips_aot_autograd_and_is_correct(cache_dir, monkeypatch):
    torch.manual_seed(0)
    model, x = Tiny(), torch.randn(3, 8)
    with torch.no_grad():
        ref = model(x)
    torch.testing.assert_close(run_fresh(model, x), ref)
    assert (stats()["dynamo_misses"], stats()["misses"]) == (1, 1)
    (plan_entry,) = [e for e in Store(cache_dir).entries() if e.read_json("plan.json")]
    assert plan_entry.read_json("meta.json")["kind"] == "dynamo"

    import torch._functorch.aot_autograd as aot

    def no_trace(*a, **k):
        raise AssertionError("a Dynamo-level hit ran AOTAutograd")
    monkeypatch.setattr(aot, "create_aot_state", no_trace)
    reset_stats()
    torch.testing.assert_close(run_fresh(model, x), ref)
    s = stats()
    assert (s["dynamo_hits"], s["hits_disk"], s["misses"]) == (1, 1, 0)
    model.a.weight.data.mul_(-1)  # new weights are runtime inputs, not baked in
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, backend="neuron")(x), model(x))


@pytest.mark.parametrize("fn, reason", [
    (lambda x: x.add_(1).mul(2), "input_mutation"),
    (lambda x: (x.view(-1), x * 2), "aliased_outputs"),
    (lambda x: x * torch.rand_like(x), "random_ops"),
])
def test_unsafe_graph_kinds_bypass_and_stay_correct(cache_dir, fn, reason):
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    torch._dynamo.reset()
    with torch.no_grad():
        xe, xc = x.clone(), x.clone()
        torch.manual_seed(1)
        ref = fn(xe)
        torch.manual_seed(1)
        out = torch.compile(fn, backend="neuron")(xc)
    if reason != "random_ops":
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(xc, xe)
    assert stats()["dynamo_bypasses"] == {reason: 1} and stats()["dynamo_misses"] == 0


class TwoHeads(torch.nn.Module):
    """A differentiable output, an integer one (non-differentiable) and one the loss ignores."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = self.b(torch.relu(self.a(x)))
        return h * 2, h.argmax(-1), h.exp()


def train_step(model, x, compiled):
    for p in [*model.parameters(), x]:
        p.grad = None
    fn = torch.compile(model, backend="neuron") if compiled else model
    y, idx, unused = fn(x)
    (y * torch.arange(4.0)).sum().backward()  # the grad of a sum arrives expanded (stride 0)
    return [y, idx, *[p.grad.clone() for p in model.parameters()], x.grad.clone()]


@pytest.mark.smoke
def test_training_warm_hit_skips_aot_autograd_and_matches_eager(cache_dir, monkeypatch):
    torch.manual_seed(0)
    model, x = TwoHeads(), torch.randn(3, 8, requires_grad=True)
    ref = train_step(model, x, False)
    torch._dynamo.reset()
    clear_memory()
    for a, b in zip(train_step(model, x, True), ref):
        torch.testing.assert_close(a, b)
    assert (stats()["dynamo_misses"], stats()["misses"]) == (1, 2)

    import torch._functorch.aot_autograd as aot
    monkeypatch.setattr(aot, "create_aot_state", lambda *a, **k: pytest.fail("AOTAutograd ran"))
    torch._dynamo.reset()
    clear_memory()
    reset_stats()
    got = train_step(model, x, True)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)
    assert not got[1].requires_grad
    assert (stats()["dynamo_hits"], stats()["hits_disk"], stats()["misses"]) == (1, 2, 0)
    with pytest.raises(RuntimeError):  # double backward is refused, as AOTAutograd refuses it
        y = torch.compile(model, backend="neuron")(x)[0]
        (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        g.sum().backward()


def test_training_graph_with_dropout_bypasses(cache_dir):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5))
    torch._dynamo.reset()
    torch.compile(model, backend="neuron")(torch.randn(3, 8)).sum().backward()
    assert stats()["dynamo_bypasses"] == {"random_ops": 1} and stats()["dynamo_misses"] == 0


@pytest.mark.parametrize("shape", [[], "plan", {"mode": "inference", "forward": "x"}])
def test_wrong_shape_plan_is_quarantined_once_and_recompiled(cache_dir, shape):
    torch.manual_seed(0)
    model, x = Tiny(), torch.randn(3, 8)
    with torch.no_grad():
        ref = model(x)
    run_fresh(model, x)
    store = Store(cache_dir)
    (e,) = [e for e in store.entries() if e.read_json("plan.json")]
    data = json.dumps(shape).encode()
    (e.path / "plan.json").write_bytes(data)
    man = json.loads((e.path / "manifest.json").read_text())
    man["files"]["plan.json"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    (e.path / "manifest.json").write_text(json.dumps(man))
    reset_stats()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.testing.assert_close(run_fresh(model, x), ref)
        torch.testing.assert_close(run_fresh(model, x), ref)
    assert len([w for w in caught if issubclass(w.category, NeuronCacheWarning)]) == 1
    assert stats()["quarantined"] == 1 and stats()["dynamo_hits"] == 1


CASES = [
    ("empty", lambda x: (x * 2).sum(0), lambda: [torch.randn(0, 5)]),
    ("int_and_mask", lambda i, m: torch.where(m, i * 3, -i), lambda: [torch.randint(-1000, 1000, (7, 3)),
                                                                      torch.rand(7, 3) > 0.5]),
    ("bf16", lambda x, w: torch.softmax(x @ w, -1), lambda: [torch.randn(5, 8, dtype=torch.bfloat16),
                                                             torch.randn(8, 3, dtype=torch.bfloat16)]),
    ("strided", lambda x: x.exp() + 1, lambda: [torch.randn(6, 4).t()]),
    ("several_outputs", lambda x: (x.sum(-1), x.amax(0), x.abs()), lambda: [torch.randn(3, 130)]),
]


@pytest.mark.parametrize("name, fn, make", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("train", [False, True])
def test_warm_hits_match_eager_on_edge_inputs(cache_dir, name, fn, make, train):
    torch.manual_seed(0)
    args = make()
    if train and not args[0].is_floating_point():
        pytest.skip("integer inputs have no grad")
    results = []
    for attempt in range(2):  # cold, then a warm "process"
        torch._dynamo.reset()
        clear_memory()
        a = [x.detach().clone().requires_grad_(train and x.is_floating_point()) for x in args]
        with torch.set_grad_enabled(train):
            out = torch.compile(fn, backend="neuron")(*a)
            outs = out if isinstance(out, tuple) else (out,)
            if train:
                sum(o.float().sum() for o in outs if o.requires_grad).backward()
        results.append([o.detach() for o in outs] + [x.grad for x in a if x.grad is not None])
    a = [x.detach().clone().requires_grad_(train and x.is_floating_point()) for x in args]
    with torch.set_grad_enabled(train):
        out = fn(*a)
        outs = out if isinstance(out, tuple) else (out,)
        if train:
            sum(o.float().sum() for o in outs if o.requires_grad).backward()
    ref = [o.detach() for o in outs] + [x.grad for x in a if x.grad is not None]
    tol = dict(rtol=2e-2, atol=2e-2) if name == "bf16" else {}
    for got in results:
        assert len(got) == len(ref)
        for g, r in zip(got, ref):
            torch.testing.assert_close(g, r, **tol)
    assert stats()["dynamo_hits"] + sum(stats()["dynamo_bypasses"].values()) >= 1


class Sorted(torch.nn.Module):
    def forward(self, x):
        return x.sort(-1).values * 2  # sort: a declared fallback


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_warm_hit_reports_the_declared_fallbacks_again(cache_dir, caplog, grad):
    """A graph served from disk runs the same host ops as its cold compile: the new process counts
    them (``stats.fallback_ops``) and logs them once, as the cold compile did."""
    from neuron_inductor import stats as global_stats
    model, x = Sorted(), torch.randn(3, 8, requires_grad=grad)

    def run():
        torch._dynamo.reset()
        clear_memory()
        global_stats.reset()
        out = torch.compile(model, backend="neuron")(x)
        if grad:
            out.sum().backward()
        return out
    torch.testing.assert_close(run(), model(x))
    assert global_stats.fallback_ops()["aten.sort.default"] >= 1
    caplog.clear()
    with caplog.at_level("WARNING", logger="neuron_inductor"):
        torch.testing.assert_close(run(), model(x))
    assert stats()["hits_disk"] >= 1 and stats()["misses"] == 0
    assert global_stats.fallback_ops()["aten.sort.default"] >= 1
    assert "from the compile cache" in caplog.text and "aten.sort.default" in caplog.text


def test_aten_keys_go_to_the_recording_passed_down_even_from_another_thread():
    """The Dynamo-level recording travels as an argument (no thread-local): AOTAutograd compiles the
    backward at the first backward call, which autograd may run on another thread."""
    import threading

    from _fake import graph, make_compile_fn

    from neuron_inductor.cache import compile_cached

    rec, x = dynamo.Recording(), torch.arange(6.0)
    compile_cached(graph(), [x], "forward", get_config(), make_compile_fn(None), record_into=rec)
    t = threading.Thread(target=lambda: compile_cached(graph(), [x + 0], "backward", get_config(),
                                                       make_compile_fn(None), record_into=rec))
    t.start()
    t.join()
    assert set(rec.keys) == {"forward", "backward"} and rec.problem is None
    compile_cached(graph(), [x], "forward", get_config(), make_compile_fn(None))  # no recording: nothing noted
    assert set(rec.keys) == {"forward", "backward"}


def test_the_aot_compile_gets_a_recording_only_when_a_plan_can_be_stored():
    from neuron_inductor.cache import compile_dynamo_cached

    gm, ex = capture(f, X, W)
    seen = []

    def aot(rec):
        seen.append(rec)
        return gm.forward
    compile_dynamo_cached(gm, ex, get_config(), aot)
    compile_dynamo_cached(gm, ex, get_config().replace(cache=False), aot)
    assert isinstance(seen[0], dynamo.Recording) and seen[1] is None
