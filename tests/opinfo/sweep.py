"""PyTorch's OpInfo database through ``backend="neuron"``: every sample of an op, eager vs compiled,
forward and gradients.

An OpInfo sample is one call of an op with inputs ``torch.testing`` builds to reach its corners
(scalars, empty tensors, broadcasting, non-contiguous views, negative dims, extreme integers). The
tensors of a sample become the compiled function's inputs (not constants baked into the graph), so
each sample compiles the op as a user's program would. Outcomes are those of
:mod:`tests.fuzz.diff`: ``ok``, ``fallback`` (right numbers, some op declared as a host call),
``invalid`` (eager itself refuses the sample, or the op is random / uninitialised, which no
comparison can judge), and the failures ``compile-error``, ``sim-error``, ``error``, ``wrong-fwd``,
``wrong-grad``. A whole graph sent to eager after a compiler exception counts as ``graph-fallback``:
the numbers are right and the user was warned, but it is a compiler bug to fix.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from torch.utils import _pytree as pytree

from tests.fuzz.diff import Outcome, _close, failure

#: ops whose result is random or uninitialised: eager and compiled legitimately differ
UNJUDGEABLE = ("rand", "normal", "bernoulli", "dropout", "multinomial", "uniform", "exponential",
               "cauchy", "geometric", "log_normal", "empty", "randint", "randn", "new_empty",
               "nn.functional.feature_alpha_dropout", "nn.functional.alpha_dropout")


@dataclass
class Case:
    """One OpInfo sample as a program: ``fn(*tensors)`` calls the op."""

    op: str
    index: int
    dtype: torch.dtype
    tensors: list[torch.Tensor]
    fn: Any
    noisy: bool
    dim: int | None = None  # the sample's ``dim`` argument (``topk``'s tie check)

    def describe(self) -> str:
        shapes = ", ".join(f"{list(t.shape)}:{str(t.dtype).replace('torch.', '')}" for t in self.tensors)
        return f"{self.op}[{self.index}] {str(self.dtype).replace('torch.', '')} ({shapes})"


def _judgeable(name: str) -> bool:
    return not any(name == u or name.startswith(u + "_") or name.startswith(u + ".") or u in name.split(".")
                   for u in UNJUDGEABLE) and "rand" not in name and "empty" not in name


def cases(op, dtype: torch.dtype, grad: bool, limit: int) -> Iterator[Case]:
    """The first ``limit`` samples of ``op`` in ``dtype`` (none when the op does not support it)."""
    if not _judgeable(op.name) or op.name.startswith(("sparse", "_refs")) or dtype not in op.supported_dtypes("cpu"):
        return
    grad = grad and op.supports_autograd and (dtype.is_floating_point or dtype.is_complex)
    try:
        samples = op.sample_inputs("cpu", dtype, requires_grad=grad)
    except Exception:  # noqa: BLE001 - an OpInfo that cannot build samples on this build is skipped
        return
    for i, s in enumerate(itertools.islice(samples, limit)):
        leaves, spec = pytree.tree_flatten((s.input, s.args, s.kwargs))
        if any(isinstance(v, torch.Tensor) and v.layout != torch.strided for v in leaves):
            continue  # sparse and nested layouts are not compiled by this backend
        slots = [k for k, v in enumerate(leaves) if isinstance(v, torch.Tensor)]

        def fn(*ts, _leaves=leaves, _spec=spec, _slots=slots, _op=op.op):
            vals = list(_leaves)
            for k, t in zip(_slots, ts):
                vals[k] = t
            inp, args, kwargs = pytree.tree_unflatten(vals, _spec)
            return _op(inp, *args, **kwargs)

        dim = s.kwargs.get("dim", s.args[1] if len(s.args) > 1 else -1) if op.name == "topk" else None
        yield Case(op.name, i, dtype, [leaves[k] for k in slots], fn, noisy=dtype != torch.float32,
                   dim=dim)


def _flat_tensors(x) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


def _inputs(ts: list[torch.Tensor]) -> list[torch.Tensor]:
    out = []
    for t in ts:
        c = t.detach().clone()
        if t.requires_grad:
            c.requires_grad_(True)
        out.append(c)
    return out


def run_case(c: Case) -> Outcome:
    """Eager vs compiled for one sample, forward and (for inputs that require grad) backward."""
    from neuron_inductor import stats
    ea = _inputs(c.tensors)
    try:
        want = _flat_tensors(c.fn(*ea))
        diff = [t for t in want if t.requires_grad]
        seeds = [torch.randn_like(t) for t in diff]
        if diff:
            torch.autograd.backward(diff, seeds)
    except Exception as e:  # noqa: BLE001 - eager refusing the sample is not ours to judge
        return Outcome("invalid", f"eager: {type(e).__name__}: {e}".splitlines()[0][:200])
    ca = _inputs(c.tensors)
    torch._dynamo.reset()
    stats.reset()
    try:
        got = _flat_tensors(torch.compile(c.fn, backend="neuron")(*ca))
        gdiff = [t for t in got if t.requires_grad]
        if diff and len(gdiff) == len(diff):
            torch.autograd.backward(gdiff, seeds)
    except Exception as e:  # noqa: BLE001 - every failure is classified and reported
        return failure(e)
    finally:
        torch._dynamo.reset()
    if len(got) != len(want):
        return Outcome("wrong-fwd", f"{len(got)} outputs, eager {len(want)}")
    ref: list = []  # the fp32 run, made on the first low-precision mismatch

    def differs(kind: str, k: int, g: torch.Tensor, w: torch.Tensor) -> str | None:
        bad = _close(g, w, c.noisy)
        if bad and c.noisy:
            if not ref:
                ref.append(_fp32_run(c, seeds))
            vals = ref[0][kind] if ref[0] else []
            r = vals[k] if k < len(vals) else None
            if r is not None and _within_eager_error(g, w, r):
                return None
        return bad

    tied = c.op == "topk" and not torch.equal(got[1], want[1]) and _same_tied_values(c, got, want)
    for k, (g, w) in enumerate(zip(got, want)):
        if tied and k == 1:
            continue
        bad = differs("out", k, g, w)
        if bad:
            return Outcome("wrong-fwd", f"output {k}: {bad}")
    for k, (a, b) in enumerate(zip(ca, ea)):
        if (a.grad is None) != (b.grad is None):
            return Outcome("wrong-grad", f"input {k}: grad missing on one side")
        if a.grad is not None:
            expected = b.grad
            if tied and k == 0 and seeds:  # the values' gradient lands on the compiled indices
                expected = torch.zeros_like(b.grad).scatter_add(c.dim, got[1], seeds[0].to(b.grad.dtype))
            bad = differs("grad", k, a.grad, expected)
            if bad:
                return Outcome("wrong-grad", f"input {k}.grad: {bad}")
    if stats.compiled()["graph_fallbacks"]:
        return Outcome("graph-fallback", "a compiler exception sent a whole graph to eager")
    fb = stats.fallback_ops()
    if fb:
        return Outcome("fallback", ", ".join(sorted(map(str, fb))))
    return Outcome("ok")


def _same_tied_values(c: Case, got: list, want: list) -> bool:
    """``topk`` indices that differ from eager's only among equal values: torch leaves the order
    of tied values unspecified (the compiled kernel takes the lowest index first), so indices are
    right when they select the values eager returned."""
    x, g, w = c.tensors[0].detach(), got[1], want[1]
    if g.shape != w.shape or g.dtype != w.dtype or x.dim() == 0:
        return False
    picked, expected = x.gather(c.dim, g), want[0].detach()
    return bool(((picked == expected) | (picked.isnan() & expected.isnan())).all())


def _fp32_run(c: Case, seeds: list[torch.Tensor]) -> dict[str, list] | None:
    """The sample run eagerly with its low-precision float tensors in float32: outputs ("out") and
    input gradients ("grad"), the reference a bf16 result is judged by. None when the op refuses."""
    ra = []
    for t in c.tensors:
        u = t.detach().clone()
        if u.is_floating_point() and u.dtype != torch.float64:
            u = u.float()
        ra.append(u.requires_grad_(t.requires_grad))
    try:
        out = _flat_tensors(c.fn(*ra))
        diff = [t for t in out if t.requires_grad]
        if diff:
            torch.autograd.backward(diff, [s.float() for s in seeds])
    except Exception:  # noqa: BLE001 - no reference, the comparison with eager stands
        return None
    return {"out": out, "grad": [a.grad for a in ra]}


def _within_eager_error(got: torch.Tensor, want: torch.Tensor, ref: torch.Tensor) -> bool:
    """A low-precision result that differs from eager's but is no farther from the fp32 result than
    twice eager's own distance, per element, plus the noisy tolerance: a fused kernel keeps
    intermediates in fp32 where eager rounds each op to bf16, and is then the closer of the two."""
    if ref.shape != got.shape or not ref.is_floating_point():
        return False
    g, w, r = (t.detach().double() for t in (got, want, ref))
    finite = torch.isfinite(r)
    if not torch.equal(finite, torch.isfinite(g)):
        return False
    scale = float(r[finite].abs().max()) if finite.any() else 1.0
    return bool(((g - r).abs()[finite] <= 2 * (w - r).abs()[finite] + 1e-2 * (1 + scale)).all())


def op_db() -> list:
    from torch.testing._internal.common_methods_invocations import op_db as db
    return list(db)
