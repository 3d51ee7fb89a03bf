"""The cost model against measured NKI kernels: NKIBench's 14 and the NKI matmul tutorial's 4.

    .venv/bin/python benchmarks/calibrate.py --nkibench PATH [--target trn1]

PATH is a checkout of https://github.com/zhang677/AccelOpt (Apache-2.0); nothing of it is copied into
this repository. For each NKIBench problem the script reads
* the kernel ``NKIBench/kernels/<name>_0.py`` (classic ``neuronxcc.nki`` API) and runs it against the
  recording front end of tests/costmodel/nki_classic.py, which turns every call into our tile IR —
  the exact instruction stream that was measured;
* the input shapes from ``NKIBench/reference/<name>_numpy_*.py`` (``get_inputs`` and
  ``transform_to_nki_inputs``, evaluated on shape-only stand-ins for NumPy arrays);
* the measured latency from ``experiments/full_complete_local/profile_results.csv`` (neuron-profile,
  one trn1 NeuronCore, fp32, mean of 10 runs; the CSV also gives per-engine active time, printed
  beside the model's engine busy time);
and prints predicted vs measured. The tutorial's four kernels (tests/costmodel/tutorial_kernels.py,
bf16 [4096,8192]@[8192,8192], published with an older SDK) are printed beside them without a target.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "costmodel"))

from neuron_inductor.costmodel import estimate_kernel  # noqa: E402
from neuron_inductor.target import get_target  # noqa: E402
from nki_classic import HBMArg, load_kernel_source, trace_kernel  # noqa: E402
from tutorial_kernels import PUBLISHED_MS, all_kernels  # noqa: E402

PROFILE = "experiments/full_complete_local/profile_results.csv"
TOLERANCE = 0.25
GEOMEAN_BAR = 0.12


class _ShapeOnly:
    """A NumPy array stand-in that only knows its shape (``get_inputs`` would allocate gigabytes)."""

    def __init__(self, shape, dtype="float32"):
        self.shape, self.dtype = tuple(int(s) for s in shape), dtype

    def astype(self, dtype):
        return _ShapeOnly(self.shape, _np_name(dtype))

    def reshape(self, shape, *more):
        return _ShapeOnly(shape if not more else (shape, *more), self.dtype)


def _np_name(dtype) -> str:
    import numpy
    return numpy.dtype(dtype).name


class _FakeNumpy:
    """The few NumPy calls the reference modules make to build inputs, on shapes only."""

    def __init__(self):
        import numpy
        self._np = numpy
        self.random = self

    def normal(self, loc=0.0, scale=1.0, size=None):
        return _ShapeOnly(size)

    rand = randn = uniform = normal

    def abs(self, x):
        return x

    def reshape(self, x, shape):
        return x.reshape(shape)

    def __getattr__(self, name):
        return getattr(self._np, name)


def nki_inputs(reference: Path) -> list:
    src = reference.read_text().replace("import numpy as np", "")
    ns: dict = {"np": _FakeNumpy()}
    exec(compile(src, str(reference), "exec"), ns)
    inputs = ns["transform_to_nki_inputs"](ns["get_inputs"]())
    return [HBMArg(x.shape, x.dtype) if isinstance(x, _ShapeOnly) else x for x in inputs]


def measured(root: Path) -> dict[str, dict]:
    out = {}
    with open(root / PROFILE) as f:
        for row in csv.DictReader(f):
            prof = json.loads(row["profile"])
            out[row["problem"]] = {"kernel": Path(row["kernel"]).name, "task": Path(row["task"]).name,
                                   "values": row["values"], **prof}
    return out


def price_nkibench(root: Path, target) -> list[dict]:
    rows = []
    for problem, m in measured(root).items():
        bench = root / "NKIBench"
        kpath = bench / "kernels" / m["kernel"]
        fn = load_kernel_source(kpath.read_text(), str(kpath))
        kernel = trace_kernel(fn, nki_inputs(bench / "reference" / m["task"]), problem)
        cost = estimate_kernel(kernel, target)
        lat = m["latency"] * 1e-3
        rows.append({"name": problem, "shape": m["values"], "model": cost.seconds, "measured": lat,
                     "cost": cost, "active": {e: m.get(f"{e}_engine_active_time_percent") for e in
                                              ("scalar", "vector", "gpsimd")}})
    return rows


def _fmt_engines(cost, active) -> str:
    s = cost.seconds
    parts = [f"PE {100 * cost.busy_s['tensor'] / s:3.0f}%", f"DMA {100 * cost.busy_s['dma'] / s:3.0f}%"]
    for e, short in (("scalar", "ACT"), ("vector", "DVE"), ("gpsimd", "POOL")):
        meas = active.get(e)
        meas_s = f"{100 * meas:3.0f}%" if meas is not None else "  - "
        parts.append(f"{short} {100 * cost.busy_s[e] / s:3.0f}%/{meas_s}")
    return "  ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nkibench", required=True, type=Path, help="checkout of zhang677/AccelOpt")
    ap.add_argument("--target", default="trn1")
    args = ap.parse_args(argv)
    target = get_target(args.target)
    rows = price_nkibench(args.nkibench, target)
    print(f"NKIBench (zhang677/AccelOpt, {PROFILE}): measured on one trn1 NeuronCore, fp32, "
          f"neuron-profile mean of 10 runs; model target {target.name}")
    print(f"{'kernel':<24} {'model ms':>9} {'measured':>9} {'error':>8}  engines: model busy / measured active")
    logs, ok = [], True
    for r in sorted(rows, key=lambda r: r["name"]):
        err = r["model"] / r["measured"] - 1
        logs.append(abs(math.log(r["model"] / r["measured"])))
        ok &= abs(err) <= TOLERANCE
        flag = "" if abs(err) <= TOLERANCE else "  <-- outside +-25%"
        print(f"{r['name']:<24} {r['model'] * 1e3:9.3f} {r['measured'] * 1e3:9.3f} {100 * err:+7.1f}%  "
              f"{_fmt_engines(r['cost'], r['active'])}{flag}")
    gm = math.exp(sum(logs) / len(logs)) - 1
    print(f"geometric-mean absolute error {100 * gm:.1f}% (bar {100 * GEOMEAN_BAR:.0f}%), "
          f"{'all' if ok else 'NOT all'} within +-{100 * TOLERANCE:.0f}%")
    print()
    print("NKI matmul tutorial, [4096,8192]@[8192,8192] bf16, trn1, older SDK (no target):")
    for k in all_kernels():
        c = estimate_kernel(k, target)
        pub = PUBLISHED_MS[k.name]
        print(f"{k.name:<24} {c.seconds * 1e3:9.3f} {pub:9.3f} {100 * (c.seconds * 1e3 / pub - 1):+7.1f}%")
    return 0 if ok and gm <= GEOMEAN_BAR else 1


if __name__ == "__main__":
    sys.exit(main())
