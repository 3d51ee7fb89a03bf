"""``neuron-inductor lint DIR``: the static NKI conformance check over a debug dump.

Finds every ``kernels.py`` under DIR (a ``NEURON_INDUCTOR_DEBUG_DIR`` dump or a cache entry), runs
:func:`neuron_inductor.codegen.conform.conformance_findings` on it (the check every compile runs)
and prints the findings grouped by rule, each with its citation. Exit 0: conforming; 1: findings;
2: no kernel module found.
"""
from __future__ import annotations

import argparse
import json
import os
from collections import defaultdict
from typing import Any

from ..target import TARGETS


def lint_dir(path: str, target: str | None = None) -> dict[str, Any]:
    """``{"modules": n, "kernels": n, "findings": {rule: ["file:kernel:line: detail", ...]}}``.

    Each module first passes the kernel allowlist (``codegen/check.py``: only documented ``nl`` /
    ``nisa`` names, no host code), reported under rule ``allowlist``, then the conformance rules."""
    import re

    from ..codegen.check import KernelCheckError, check_kernel_source
    from ..codegen.conform import conformance_findings

    by_rule: dict[str, list[str]] = defaultdict(list)
    modules = kernels = 0
    for root, _dirs, files in sorted(os.walk(path)):
        if "kernels.py" not in files:
            continue
        fname = os.path.join(root, "kernels.py")
        with open(fname, encoding="utf-8") as f:
            src = f.read()
        modules += 1
        kernels += src.count("@nki.jit")
        rel = os.path.relpath(fname, path)
        try:  # hand-written kernels are emitted as ``user_<op>_<name>``: they may read shapes
            check_kernel_source(src, user_kernels=re.findall(r"^def (user_\w+)\(", src, re.M))
        except KernelCheckError as e:
            by_rule["allowlist"].append(f"{rel}: {e}")
            continue
        try:
            found = conformance_findings(src, target)
        except SyntaxError as e:
            by_rule["syntax"].append(f"{rel}: {e}")
            continue
        for fi in found:
            by_rule[fi.rule].append(f"{rel}:{fi.kernel}:{fi.line}: {fi.detail}")
    return {"modules": modules, "kernels": kernels, "findings": dict(sorted(by_rule.items()))}


def _cmd_lint(args: argparse.Namespace) -> int:
    from ..spec import RULES

    report = lint_dir(args.dir, args.target)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        total = sum(len(v) for v in report["findings"].values())
        print(f"{report['modules']} kernel module(s), {report['kernels']} kernel(s), {total} finding(s)")
        for rule, items in report["findings"].items():
            cite = RULES[rule].citation if rule in RULES else ""
            print(f"\n[{rule}] {len(items)} finding(s)" + (f" -- {cite}" if cite else ""))
            for line in items:
                print(f"  {line}")
    if report["modules"] == 0:
        return 2
    return 1 if report["findings"] else 0


def add_lint_parser(sub: Any) -> None:
    p = sub.add_parser("lint", help="check the NKI kernels of a debug dump against the documented "
                                    "instruction rules (findings by rule; exit 1 on findings)")
    p.add_argument("dir", help="directory to search for kernels.py files (e.g. a NEURON_INDUCTOR_DEBUG_DIR)")
    p.add_argument("--target", choices=tuple(TARGETS), default=None,
                   help="check against this target instead of the one each module records")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_cmd_lint)
