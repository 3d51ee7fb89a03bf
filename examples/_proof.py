"""What every example uses to show that the backend did its job: a comparison with eager whose
tolerance comes from eager's own run-to-run spread, and a one-line account of what was compiled.

Why a spread: eager PyTorch on a CPU does not give the same bits from run to run when the thread
count changes (a matmul or convolution splits its sums differently), so a fixed tolerance is either
loose enough to hide bugs or tight enough to fail on eager's own noise. Each example runs its eager
reference twice, on one thread and on several (training runs: from weights one ulp apart, see
:func:`eager_nudged`), and accepts compiled results within a few times that distance (plus a floor
for results that eager reproduces bit for bit).
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any, Callable, Iterator

import torch

#: compiled results may differ from eager by this many times eager's own thread-count spread
SPREAD_FACTOR = 4.0


def _flat(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x.detach().float()]
    if isinstance(x, dict):
        return [t for k in sorted(x) for t in _flat(x[k])]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _flat(v)]
    return [torch.tensor(float(x))]


def max_diff(a: Any, b: Any) -> float:
    """The largest absolute difference between two results (tensors, numbers or nestings of them)."""
    fa, fb = _flat(a), _flat(b)
    assert len(fa) == len(fb) and all(x.shape == y.shape for x, y in zip(fa, fb)), "results differ in shape"
    return max((float((x - y).abs().max()) for x, y in zip(fa, fb) if x.numel()), default=0.0)


def eager_twice(fn: Callable[[], Any]) -> tuple[Any, float]:
    """Run the eager reference ``fn`` on one thread and on at least two; return the second result
    and the distance between the two (eager's own spread)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one = fn()
    finally:
        torch.set_num_threads(max(threads, 2))
    try:
        many = fn()
    finally:
        torch.set_num_threads(threads)
    return many, max_diff(one, many)


def nudge_(model: torch.nn.Module) -> None:
    """Move every parameter of ``model`` by one ulp, in place: the size of the differences that
    summation order alone makes."""
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.copy_(torch.nextafter(p, torch.full_like(p, float("inf"))))


def eager_nudged(fn: Callable[[bool], tuple]) -> tuple[tuple, tuple[float, ...]]:
    """For training runs: ``fn(nudge)`` trains eagerly, with its initial weights moved by one ulp
    (:func:`nudge_`) when ``nudge``, and returns a tuple of results (losses, weights, ...). Returns
    the plain run's tuple and, per element, the distance between the two runs.
    An optimizer like AdamW turns last-bit gradient differences into weight differences of a fraction
    of the learning rate, which every later step sees: this is eager's own spread over a training
    run, where the thread count alone often changes nothing on a tiny model."""
    plain, nudged = fn(False), fn(True)
    return plain, tuple(max_diff(a, b) for a, b in zip(plain, nudged))


def check_close(what: str, got: Any, want: Any, spread: float, floor: float) -> None:
    """Assert compiled ``got`` is within ``SPREAD_FACTOR`` x eager's spread (or ``floor``) of eager's
    ``want``, and print the figures either way."""
    diff, tol = max_diff(got, want), max(SPREAD_FACTOR * spread, floor)
    print(f"{what}: max |compiled - eager| {diff:.2e}, eager's own spread {spread:.2e}, tolerance {tol:.2e}")
    assert diff <= tol, f"{what}: compiled differs from eager by {diff:.2e} > {tol:.2e}"


def compare_training(train: Callable[..., tuple], steps: int) -> tuple:
    """Train eagerly twice (plain and nudged, :func:`eager_nudged`) and compiled once with
    ``train(compiled=..., nudge=...)`` returning ``(losses, weights, *extra)``; assert the compiled
    losses and weights are within eager's spread, print the figures and what the backend did.
    Returns the compiled run's tuple."""
    (losses_e, weights_e, *_), (spread_l, spread_w, *_) = eager_nudged(
        lambda nudge: train(compiled=False, nudge=nudge))
    got = train(compiled=True)
    losses, weights = got[0], got[1]
    print(f"losses (compiled): {[round(x, 4) for x in losses]}")
    print(f"losses (eager):    {[round(x, 4) for x in losses_e]}")
    check_close("losses", losses, losses_e, spread_l, floor=1e-5)
    check_close(f"weights after {steps} AdamW steps", weights, weights_e, spread_w, floor=1e-5)
    report()
    return got


def report(prefix: str = "") -> None:
    """Print what the backend did in this process (``neuron_inductor.stats.summary()``)."""
    from neuron_inductor import stats
    print(f"{prefix}neuron backend: {stats.summary()}", flush=True)


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[str]:
    """A temporary directory for outputs the example does not keep (Trainer's ``output_dir``),
    removed when the example ends."""
    with tempfile.TemporaryDirectory(prefix=prefix) as d:
        yield d


def smoke() -> bool:
    """``--smoke`` (or ``NEURON_INDUCTOR_SMOKE=1``): the short run CI uses."""
    import sys
    return "--smoke" in sys.argv or os.environ.get("NEURON_INDUCTOR_SMOKE") == "1"
