"""What our ``torch.backends`` autoload hook adds to ``import torch``.

Wall-clock medians of ``python -c "import torch"`` in fresh processes, runs interleaved so drift
hits every variant alike:

* ``off``     TORCH_DEVICE_BACKEND_AUTOLOAD=0 (torch loads no extension)
* ``on``      autoload on, host detected as usual (on a non-Trainium host: nothing to install)
* ``on+trn2`` autoload on with NEURON_INDUCTOR_HOST=trn2 (the default-backend hooks get installed)

Process start-up noise (tens of ms) is larger than the hook, so it also times the hook alone
in-process (torch already imported, autoload off): import of our module + detection + install.

    python benchmarks/autoload_cost.py [--runs 9]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

IMPORT = "import torch"
IN_PROCESS = """
import time, torch
t = time.perf_counter()
import neuron_inductor._autoload as a
a.autoload()
print(time.perf_counter() - t)
"""


def _env(autoload: bool, host: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1" if autoload else "0"
    env.pop("NEURON_INDUCTOR_HOST", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # measure as installed: with cached bytecode
    if host:
        env["NEURON_INDUCTOR_HOST"] = host
    return env


def _wall(code: str, env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    variants = {"off": _env(False, None), "on": _env(True, None), "on+trn2": _env(True, "trn2")}
    times: dict[str, list[float]] = {k: [] for k in variants}
    _wall(IMPORT, variants["off"])  # warm the page cache
    _wall(IN_PROCESS, variants["on+trn2"])  # and our bytecode cache
    for _ in range(args.runs):
        for name, env in variants.items():
            times[name].append(_wall(IMPORT, env))
    hook = []
    for host in (None, "trn2"):
        out = subprocess.run([sys.executable, "-c", IN_PROCESS], env=_env(False, host), check=True,
                             capture_output=True, text=True).stdout
        hook.append(float(out.strip().splitlines()[-1]))
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "runs": args.runs,
        "median_s": med,
        "diff_on_minus_off_s": med["on"] - med["off"],
        "diff_trn2_minus_off_s": med["on+trn2"] - med["off"],
        "hook_in_process_s": {"detected_host": hook[0], "trn2": hook[1]},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"import torch, median of {args.runs} fresh processes:")
    for k, v in med.items():
        print(f"  {k:8s} {v * 1e3:8.1f} ms")
    print(f"  on - off       {result['diff_on_minus_off_s'] * 1e3:+8.1f} ms  (includes torch's own "
          "entry-point scan and process noise)")
    print(f"  on+trn2 - off  {result['diff_trn2_minus_off_s'] * 1e3:+8.1f} ms")
    print(f"hook alone, in process: {hook[0] * 1e3:.2f} ms (this host), {hook[1] * 1e3:.2f} ms (trn2 declared)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
