"""Cold compile time of neuron_inductor against TorchInductor, side by side in one run.

Each measurement is a fresh process with empty caches (ours and Inductor's). We time the first
forward+backward call (compile + run) and a second one (run only); compile time is their difference,
so the simulator's CPU execution of the kernels is not counted as compile time.

Wall time swings with the load of a shared machine, so the same difference is also taken in CPU
seconds: the child's own CPU time (first call minus second call) plus the CPU time of the processes
it started and reaped (Inductor's compile workers build its C++ kernels), which the parent reads from
``getrusage(RUSAGE_CHILDREN)`` around the child minus the child's own total.
A third row, ``aot floor``, is torch's own ``aot_eager_decomp_partition`` backend: Dynamo, the
AOTAutograd joint trace, the decompositions and the min-cut partitioner our backend also runs, with
no compiler behind them. It is the part of our cold compile that is torch's, not ours; the last line
splits our compile time into that floor and our own stages (passes, lowering, codegen, cache).
Run: ``python benchmarks/compile_time.py [--model block|llama|both] [--repeat 1]``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
_LABEL = {"aot_eager_decomp_partition": "aot floor"}


def child(backend: str, model_name: str) -> None:
    import torch

    from _models import TransformerBlock, tiny_llama
    torch.manual_seed(0)
    if model_name == "llama":
        model = tiny_llama()
        ids = torch.randint(0, 256, (2, 64))

        def step(m):
            m(input_ids=ids, labels=ids).loss.backward()
    else:
        model = TransformerBlock()
        x = torch.randn(2, 64, 64, requires_grad=True)

        def step(m):
            m(x).sum().backward()
    cm = torch.compile(model, backend=backend)
    t0, c0 = time.perf_counter(), time.process_time()
    step(cm)
    t1, c1 = time.perf_counter(), time.process_time()
    step(cm)
    t2, c2 = time.perf_counter(), time.process_time()
    print(json.dumps({"first": t1 - t0, "second": t2 - t1, "cpu_first": c1 - c0, "cpu_second": c2 - c1,
                      "cpu_self": _cpu(resource.RUSAGE_SELF)}), flush=True)


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def measure(backend: str, model_name: str) -> dict:
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, NEURON_INDUCTOR_CACHE_DIR=os.path.join(d, "ni"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(d, "inductor"), PYTHONPATH=HERE)
        before = _cpu(resource.RUSAGE_CHILDREN)
        out = subprocess.run([sys.executable, __file__, "--child", backend, model_name], env=env,
                             capture_output=True, text=True, check=True)
        tree = _cpu(resource.RUSAGE_CHILDREN) - before
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["compile"] = r["first"] - r["second"]
    # the child's descendants (compile workers) only compile; the child itself also imports and runs
    r["cpu_compile"] = r["cpu_first"] - r["cpu_second"] + max(0.0, tree - r["cpu_self"])
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="both", choices=["block", "llama", "both"])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    models = ["block", "llama"] if args.model == "both" else [args.model]
    print(f"{'model':8}{'backend':10}{'first call s':>14}{'steady s':>10}{'compile s':>11}{'compile CPU s':>15}")
    for m in models:
        res = {}
        for be in ("neuron", "inductor", "aot_eager_decomp_partition"):
            runs = [measure(be, m) for _ in range(args.repeat)]
            res[be] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            r = res[be]
            print(f"{m:8}{_LABEL.get(be, be):10}{r['first']:>14.2f}{r['second']:>10.2f}{r['compile']:>11.2f}"
                  f"{r['cpu_compile']:>15.2f}")
        ratio = res["neuron"]["compile"] / res["inductor"]["compile"]
        cpu = res["neuron"]["cpu_compile"] / res["inductor"]["cpu_compile"]
        print(f"{m:8}cold compile neuron / inductor = {ratio:.2f} (wall), {cpu:.2f} (CPU)")
        floor = res["aot_eager_decomp_partition"]
        own = (res["neuron"]["compile"] - floor["compile"]) / res["inductor"]["compile"]
        own_cpu = (res["neuron"]["cpu_compile"] - floor["cpu_compile"]) / res["inductor"]["cpu_compile"]
        print(f"{m:8}of which torch's AOT floor = {floor['compile'] / res['inductor']['compile']:.2f}, "
              f"our own stages = {own:.2f} (wall), {own_cpu:.2f} (CPU) of inductor's")


if __name__ == "__main__":
    main()
