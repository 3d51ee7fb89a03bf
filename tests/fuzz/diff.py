"""Run a generated program eagerly and compiled (``backend="neuron"``), forward and gradients, and
classify the outcome.

Outcomes: ``ok``; ``fallback`` (right numbers, but some op ran on the host: ``stats.fallback_ops()``);
``invalid`` (eager itself refuses the program: a generator bug, not ours); and the failures
``compile-error``, ``sim-error`` (the simulator refused a kernel), ``error`` (anything else raised),
``wrong-fwd`` and ``wrong-grad``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .gen import Program

FAILURES = ("compile-error", "sim-error", "error", "wrong-fwd", "wrong-grad")


@dataclass
class Outcome:
    kind: str
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.kind in FAILURES


def _tensors(x) -> list[torch.Tensor]:
    return [t for t in (x if isinstance(x, (tuple, list)) else (x,)) if isinstance(t, torch.Tensor)]


def _close(got: torch.Tensor, want: torch.Tensor, noisy: bool) -> str | None:
    """None when ``got`` matches ``want``; else a one-line description.

    fp32: only summation order differs, so 1e-3 relative plus 1e-4 of the tensor's scale. A program
    that rounds to bf16 inside can flip a rounding on an ulp of difference, moving a value by a bf16
    ulp that later ops amplify: 3e-2 relative, 1e-2 of the scale, and up to 0.5% outliers."""
    if got.shape != want.shape:
        return f"shape {list(got.shape)} != eager {list(want.shape)}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != eager {want.dtype}"
    if want.numel() == 0:
        return None
    g, w = got.detach().double(), want.detach().double()
    finite = torch.isfinite(w)
    scale = float(w[finite].abs().max()) if finite.any() else 1.0
    rtol, atol, frac = (3e-2, 1e-2, 5e-3) if noisy else (1e-3, 1e-4, 0.0)
    bad = ~((g - w).abs() <= atol * (1 + scale) + rtol * w.abs())
    bad &= ~(torch.isnan(g) & torch.isnan(w))
    bad &= ~(torch.isinf(w) & (g == w))
    n = int(bad.sum())
    if n == 0 or n <= frac * w.numel():
        return None
    i = int(bad.reshape(-1).nonzero()[0])
    return (f"{n} of {w.numel()} elements differ (first: flat {i}, eager {float(w.reshape(-1)[i]):.6g}, "
            f"compiled {float(g.reshape(-1)[i]):.6g})")


def failure(e: BaseException) -> Outcome:
    """The outcome of an exception raised while compiling or running: the simulator refusing a
    kernel, Dynamo reporting a backend failure, or anything else."""
    names = {c.__name__ for c in type(e).__mro__}
    kind = "sim-error" if "SimulatorError" in names or "SimulatorError" in str(e)[:200] else \
        "compile-error" if "BackendCompilerFailed" in names else "error"
    msg = str(e).strip().splitlines()
    return Outcome(kind, f"{type(e).__name__}: {' | '.join(msg[:3])}"[:400])


def _inputs(args, grad: bool) -> list:
    out = []
    for a in args:
        c = a.detach().clone()
        if grad and c.is_floating_point():
            c.requires_grad_(True)
        out.append(c)
    return out


#: where :func:`_shifted` places the second call's inputs in their storage
SHIFT = 3


def _shifted(args, grad: bool) -> list:
    """The inputs again, each at storage offset ``SHIFT`` of a larger buffer (same sizes and
    strides): Dynamo does not guard offsets, so the compiled graph is reused as is, as it is for a
    per-expert slice of a packed weight. Code that baked the first call's offsets reads wrong data."""
    out = []
    for a in args:
        buf = torch.empty(a.numel() + SHIFT, dtype=a.dtype)
        c = buf[SHIFT:].view(a.shape).detach()  # a leaf that keeps the offset
        c.copy_(a)
        if grad and c.is_floating_point():
            c.requires_grad_(True)
        out.append(c)
    return out


def _compare(got, want, ca, ea, p: Program, grad: bool, where: str = "") -> Outcome | None:
    for k, (g, w) in enumerate(zip(got, want)):
        bad = _close(g, w, p.noisy)
        if bad:
            return Outcome("wrong-fwd", f"output {k}{where}: {bad}")
    if grad:
        for a, b, inp in zip(ca, ea, p.inputs):
            if b.grad is None and a.grad is None:
                continue
            if (a.grad is None) != (b.grad is None):
                return Outcome("wrong-grad", f"{inp.name}{where}: grad missing on one side")
            bad = _close(a.grad, b.grad, p.noisy)
            if bad:
                return Outcome("wrong-grad", f"{inp.name}.grad{where}: {bad}")
    return None


def run(p: Program, grad: bool = True) -> Outcome:
    """Eager vs compiled, forward and (``grad``) backward with the same random output seeds; the
    compiled program runs twice, the second time on inputs at another storage offset."""
    from neuron_inductor import stats
    try:
        fn, args = p.build()
    except Exception as e:  # noqa: BLE001 - a program that cannot be built is the generator's fault
        return Outcome("invalid", f"build: {type(e).__name__}: {e}".splitlines()[0])
    ea = _inputs(args, grad)
    try:
        want = _tensors(fn(*ea))
        seeds = [torch.randn_like(t) for t in want]
        if grad:
            torch.autograd.backward(want, seeds)
    except Exception as e:  # noqa: BLE001 - eager refusing the program is the generator's fault
        return Outcome("invalid", f"eager: {type(e).__name__}: {e}".splitlines()[0])
    ca = _inputs(args, grad)
    torch._dynamo.reset()
    stats.reset("compile", "fallback_ops")
    sa = _shifted(args, grad)
    try:
        compiled = torch.compile(fn, backend="neuron")
        got = _tensors(compiled(*ca))
        if grad:
            torch.autograd.backward(got, seeds)
        bad = _compare(got, want, ca, ea, p, grad)
        if bad:
            return bad
        got = _tensors(compiled(*sa))
        if grad:
            torch.autograd.backward(got, seeds)
    except Exception as e:  # noqa: BLE001 - every failure is classified and reported
        return failure(e)
    finally:
        torch._dynamo.reset()
    bad = _compare(got, want, sa, ea, p, grad, f" (inputs at storage offset {SHIFT})")
    if bad:
        return bad
    if stats.fallback_ops():
        return Outcome("fallback", ", ".join(sorted(map(str, stats.fallback_ops()))))
    return Outcome("ok")
