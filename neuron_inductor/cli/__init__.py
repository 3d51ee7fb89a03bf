"""``neuron-inductor``: the command line (``--version``, ``doctor``, ``ops``, ``lint DIR``, ``cache ...``).

One module per command group (:mod:`.doctor`, :mod:`.ops`, :mod:`.lint`, :mod:`.cache`); this
module only builds the parser and dispatches, so a new command is one module plus one line here.

Exit codes: 0 ok, 1 the command found a problem, 2 usage error.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from neuron_inductor import __version__

from .cache import add_cache_parser, run_cache
from .doctor import add_doctor_parser, doctor_report
from .lint import add_lint_parser, lint_dir
from .ops import add_ops_parser, supported_ops


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neuron-inductor",
        description="neuron_inductor: torch.compile backend for AWS Trainium (NKI kernels, with a "
                    "built-in simulator elsewhere).")
    parser.add_argument("--version", action="version", version=f"neuron-inductor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_doctor_parser(sub)
    add_ops_parser(sub)
    add_lint_parser(sub)
    add_cache_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help/--version exit 0, usage errors 2
        return exc.code if isinstance(exc.code, int) else 2
    if args.command is None:
        parser.print_usage(sys.stderr)
        print("neuron-inductor: error: a command is required (see --help)", file=sys.stderr)
        return 2
    if args.command == "cache":
        return run_cache(args)
    return args.func(args)


__all__ = ["main", "build_parser", "doctor_report", "supported_ops", "lint_dir",
           "add_cache_parser", "run_cache"]
