"""``neuron-inductor ops``: the ATen ops lowered to NKI kernels, by family."""
from __future__ import annotations

import argparse
import json
from typing import Any


def supported_ops() -> dict[str, list[str]]:
    """Lowered ATen ops by family (what runs in NKI kernels), and ops decomposed into those."""
    from .. import lowering  # noqa: F401  (registers every lowering)
    from ..graph.decompositions import decomposition_table
    from ..lowering.registry import KERNELS, POINTWISE, REDUCTIONS, VIEWS

    def names(ops) -> list[str]:
        return sorted({str(o).replace("aten.", "").rsplit(".", 1)[0] for o in ops
                       if str(o).startswith("aten.")})
    return {"pointwise": names(POINTWISE), "reductions": names(REDUCTIONS),
            "kernels": names(KERNELS), "views (access patterns, no kernel)": names(VIEWS),
            "decomposed first": names(decomposition_table())}


def _cmd_ops(args: argparse.Namespace) -> int:
    ops = supported_ops()
    if args.json:
        print(json.dumps(ops, indent=2))
        return 0
    for family, names in ops.items():
        if family == "decomposed first" and not args.all:
            print(f"{family}: {len(names)} ops (--all lists them)")
            continue
        print(f"{family} ({len(names)}):")
        print("  " + ", ".join(names))
    print("anything else runs as a declared fallback (eager ATen on the host, logged and counted; "
          "options={'fallback': 'error'} refuses it)")
    return 0


def add_ops_parser(sub: Any) -> None:
    ops = sub.add_parser("ops", help="list the ATen ops that are lowered to NKI kernels")
    ops.add_argument("--json", action="store_true", help="print the lists as JSON")
    ops.add_argument("--all", action="store_true", help="also list the decomposed ops")
    ops.set_defaults(func=_cmd_ops)
