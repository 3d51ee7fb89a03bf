"""``neuron-inductor``: the command line (``--version``, ``doctor``, ``lint DIR``, ``cache ...``).

``doctor`` answers the first questions of any bug report in one go: which target and runtime
(device or simulator) would be used, whether this host looks like a Trainium and why, the versions
that enter the cache key, whether the cache dir is usable, and whether torch can find the backend.

Exit codes: 0 ok, 1 ``doctor`` found a problem, 2 usage error.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
from importlib import metadata
from typing import Any, Sequence

from neuron_inductor import __version__

_VERSIONED = ("torch", "numpy", "sympy", "networkx", "transformers", "accelerate", "trl",
              "nki", "neuronxcc", "torch-neuronx")

try:  # the cache commands live in their own module; the CLI works without it
    from neuron_inductor.cli_cache import add_cache_parser, run_cache
except ImportError:  # pragma: no cover - depends on what is installed
    add_cache_parser = None  # type: ignore[assignment]
    run_cache = None  # type: ignore[assignment]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _target_info() -> dict[str, Any]:
    from neuron_inductor import config

    cfg = config.get_config()
    source = "NEURON_INDUCTOR_TARGET" if os.environ.get("NEURON_INDUCTOR_TARGET") else "default"
    return {"name": cfg.target, "source": source}


def _runtime_info(host: str | None) -> dict[str, Any]:
    """Device or simulator, decided by the same function the kernel modules use, and why."""
    try:
        from neuron_inductor.runtime import nki as rt
    except Exception as exc:  # runtime package broken or absent: say so, do not guess
        return {"mode": "unknown", "reason": f"runtime.nki failed to import: {exc}"}
    info = rt.explain()
    return {"mode": info["mode"], "reason": f"{info['reason']} (Trainium host: {host or 'no'})"}


def _cache_info() -> dict[str, Any]:
    from neuron_inductor import config

    cfg = config.get_config()
    try:
        from neuron_inductor.cache.store import check_secure, default_root

        root = default_root(cfg)
    except ImportError:
        check_secure = None
        root_s = cfg.cache_dir or os.environ.get("NEURON_INDUCTOR_CACHE_DIR") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "neuron_inductor")
        root = root_s
    path = os.fspath(root)
    info: dict[str, Any] = {"dir": path, "enabled": cfg.cache, "exists": os.path.isdir(path)}
    if info["exists"]:
        info["writable"] = os.access(path, os.W_OK | os.X_OK)
        try:
            if check_secure is not None:
                check_secure(root)
            info["secure"] = True
        except Exception as exc:
            info["secure"] = False
            info["security_problem"] = str(exc)
    else:  # created 0700 on first use: what matters is whether we may create it
        parent = os.path.dirname(os.path.abspath(path))
        while parent and not os.path.isdir(parent):
            parent = os.path.dirname(parent)
        info["writable"] = bool(parent) and os.access(parent, os.W_OK | os.X_OK)
        info["secure"] = None
        info["note"] = "created with mode 0700 on first compile"
    return info


def _backend_info() -> dict[str, Any]:
    info: dict[str, Any] = {}
    try:
        import torch._dynamo
        from torch._dynamo.backends.registry import get_default_backend, lookup_backend

        names = torch._dynamo.list_backends()
        info["registered"] = {n: n in names for n in ("neuron", "neuron_inductor")}
        try:
            lookup_backend("neuron_inductor")
            info["loadable"] = True
        except Exception as exc:
            info["loadable"] = False
            info["load_error"] = f"{type(exc).__name__}: {exc}"
        default = get_default_backend()
        info["torch_compile_default"] = default if isinstance(default, str) else repr(default)
    except Exception as exc:
        info["error"] = f"{type(exc).__name__}: {exc}"
    return info


def _autoload_info() -> dict[str, Any]:
    from neuron_inductor import autoselect

    eps = [ep.value for ep in metadata.entry_points(group="torch.backends")
           if ep.value.startswith("neuron_inductor")]
    return {
        "entry_point": eps[0] if eps else None,
        "enabled": os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "1") == "1",
        "neuron_name_owner": autoselect.neuron_name_owner() or "neuron_inductor",
        "errors": list(autoselect.errors),
    }


def doctor_report() -> dict[str, Any]:
    """Everything ``doctor`` prints, as data; ``problems`` lists what would stop a compile."""
    from neuron_inductor import autoselect

    det = autoselect.detect()
    report: dict[str, Any] = {
        "neuron_inductor": {"version": __version__,
                            "location": os.path.dirname(os.path.abspath(__file__))},
        "target": _target_info(),
        "host": {"kind": det.kind, "source": det.source, "evidence": list(det.evidence)},
        "runtime": _runtime_info(det.kind),
        "versions": {"python": platform.python_version(),
                     **{name: _version(name) for name in _VERSIONED}},
        "cache": _cache_info(),
        "autoload": _autoload_info(),
        "backend": _backend_info(),
    }
    problems = []
    backend = report["backend"]
    if "error" in backend:
        problems.append(f"torch._dynamo unavailable: {backend['error']}")
    elif not backend.get("registered", {}).get("neuron_inductor"):
        problems.append("backend 'neuron_inductor' is not registered with torch._dynamo "
                        "(is the package installed, e.g. `pip install -e .`?)")
    elif not backend.get("loadable"):
        problems.append(f"backend cannot be loaded: {backend.get('load_error')}")
    if report["runtime"]["mode"] in ("unavailable", "unknown"):
        problems.append(f"runtime: {report['runtime']['reason']}")
    cache = report["cache"]
    if cache["enabled"] and not cache.get("writable"):
        problems.append(f"cache dir {cache['dir']} is not writable: compiles will run uncached")
    if cache.get("secure") is False:
        problems.append(cache.get("security_problem", "cache dir is not private"))
    if report["autoload"]["errors"]:
        problems.append("auto-selection hook failed: " + "; ".join(report["autoload"]["errors"]))
    report["problems"] = problems
    return report


def _print_report(report: dict[str, Any]) -> None:
    def show(label: str, value: Any) -> None:
        print(f"  {label:<22} {value}")

    ni = report["neuron_inductor"]
    print(f"neuron_inductor {ni['version']}  ({ni['location']})")
    t, r, h = report["target"], report["runtime"], report["host"]
    show("target", f"{t['name']} ({t['source']})")
    show("runtime", f"{r['mode']} ({r['reason']})")
    host = h["kind"] or "not a Trainium host"
    show("host", f"{host} (source: {h['source']}{'; ' + ', '.join(h['evidence']) if h['evidence'] else ''})")
    print("versions:")
    for name, v in report["versions"].items():
        show(name, v or "-")
    c = report["cache"]
    print("cache:")
    show("dir", c["dir"])
    show("enabled", c["enabled"])
    show("exists", c["exists"])
    show("writable", c.get("writable"))
    show("secure", c.get("secure") if c.get("secure") is not None else c.get("note", "-"))
    a, b = report["autoload"], report["backend"]
    print("torch integration:")
    show("autoload entry point", a["entry_point"] or "missing")
    show("autoload enabled", a["enabled"])
    show("name 'neuron' owner", a["neuron_name_owner"])
    if "error" in b:
        show("torch._dynamo", b["error"])
    else:
        show("registered", ", ".join(f"{k}={v}" for k, v in b["registered"].items()))
        show("loadable", b["loadable"] if b["loadable"] else f"False ({b.get('load_error')})")
        show("torch.compile default", b["torch_compile_default"])
    if report["problems"]:
        print("problems:")
        for p in report["problems"]:
            print(f"  - {p}")
    else:
        print("no problems found")


def _cmd_doctor(args: argparse.Namespace) -> int:
    report = doctor_report()
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        _print_report(report)
    return 1 if report["problems"] else 0


def supported_ops() -> dict[str, list[str]]:
    """Lowered ATen ops by family (what runs in NKI kernels), and ops decomposed into those."""
    from . import lowering  # noqa: F401  (registers every lowering)
    from .graph.decompositions import decomposition_table
    from .lowering.registry import KERNELS, POINTWISE, REDUCTIONS, VIEWS

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neuron-inductor",
        description="neuron_inductor: torch.compile backend for AWS Trainium (NKI kernels, with a "
                    "built-in simulator elsewhere).")
    parser.add_argument("--version", action="version", version=f"neuron-inductor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    doctor = sub.add_parser("doctor", help="show target, runtime, host detection, versions, cache dir "
                                           "and backend registration")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.set_defaults(func=_cmd_doctor)
    ops = sub.add_parser("ops", help="list the ATen ops that are lowered to NKI kernels")
    ops.add_argument("--json", action="store_true", help="print the lists as JSON")
    ops.add_argument("--all", action="store_true", help="also list the decomposed ops")
    ops.set_defaults(func=_cmd_ops)
    from .cli_lint import add_lint_parser
    add_lint_parser(sub)
    if add_cache_parser is not None:
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
    if args.command == "cache" and run_cache is not None:
        return run_cache(args)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
