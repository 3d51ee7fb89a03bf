"""How much slower the CPU simulator runs a compiled model than eager PyTorch runs it.

    python benchmarks/sim_speed.py [--seq 128] [--tokens 16] [--repeats 5] [--threads 1]

On a machine without a Trainium the generated kernels run in ``neuron_inductor.runtime.sim``, which
executes every NKI instruction on numpy tiles and checks the hardware's rules before each one. That
is for correctness, not speed. On the tiny Llama of the tests (hidden 64, 2 layers, vocab 256), after
compiling (every figure is warm: the compile is excluded), this prints the median time of a
forward, of a training step (forward + backward) and of one generated token (static KV cache,
greedy) for eager and for ``backend="neuron"``, and their ratio.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from _models import tiny_llama


def _median(fn, repeats: int) -> float:
    fn()  # warm
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure(seq: int, tokens: int, repeats: int) -> dict[str, tuple[float, float]]:
    ids = torch.randint(3, 256, (1, seq), generator=torch.Generator().manual_seed(0))
    out: dict[str, tuple[float, float]] = {}

    model = tiny_llama().eval()
    compiled = torch.compile(model, backend="neuron")
    with torch.no_grad():
        out["forward"] = (_median(lambda: model(ids), repeats), _median(lambda: compiled(ids), repeats))

    model = tiny_llama().train()
    compiled = torch.compile(model, backend="neuron")

    def step(m):
        def run():
            m(ids, labels=ids).loss.backward()
            model.zero_grad(set_to_none=True)
        return run
    out["training step"] = (_median(step(model), repeats), _median(step(compiled), repeats))

    model = tiny_llama().eval()
    prompt = ids[:, :8]
    kw = dict(max_new_tokens=tokens, do_sample=False, cache_implementation="static")

    def generate(m):
        def run():
            m.generate(prompt, **kw)
        return run
    eager_t = _median(generate(model), 1) / tokens
    model.forward = torch.compile(model.forward, backend="neuron")
    generate(model)()  # compile prefill and decode graphs
    out["generated token"] = (eager_t, _median(generate(model), 1) / tokens)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads for both (1: steadiest figures on a busy machine)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    import os
    with tempfile.TemporaryDirectory(prefix="neuron_sim_speed_") as cache:
        os.environ.setdefault("NEURON_INDUCTOR_CACHE_DIR", cache)
        rows = measure(args.seq, args.tokens, args.repeats)
    print(f"tiny Llama, seq {args.seq}, {torch.get_num_threads()} threads (median of {args.repeats}; "
          f"generation: {args.tokens} tokens after an 8-token prompt)")
    print("| | eager | neuron (simulator) | slower by |")
    print("|---|---|---|---|")
    for name, (e, c) in rows.items():
        print(f"| {name} | {e * 1e3:.1f} ms | {c * 1e3:.1f} ms | {c / e:.0f}x |")
    from neuron_inductor import stats
    print(f"\n(no compile is timed: {stats.summary()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
