"""``neuron-inductor doctor``: the first questions of any bug report, answered in one go.

Which target and runtime (device or simulator) would be used, whether this host looks like a
Trainium and why, the versions that enter the cache key, whether the cache dir is usable, and
whether torch can find the backend. Exit 1 when a problem was found.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
from importlib import metadata
from typing import Any

from neuron_inductor import __version__

_VERSIONED = ("torch", "numpy", "sympy", "networkx", "transformers", "accelerate", "trl",
              "nki", "neuronxcc", "torch-neuronx")

def _version(dist: str) -> str | None:
    if dist == "torch":
        # the spelling the cache key uses: ``torch.__version__`` keeps the build's local suffix
        # (``2.14.1+cu130``) that the distribution metadata of some wheels lacks
        try:
            import torch
            return str(torch.__version__)
        except Exception:  # noqa: BLE001 - a broken torch is reported by the backend check
            pass
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
    out = {"mode": info["mode"], "reason": f"{info['reason']} (Trainium host: {host or 'no'})"}
    if info["mode"] == "device":
        out["device_path"] = ("graph tensors on the `neuron` device; CPU inputs copied once at the graph "
                              "boundary (refused with TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1); "
                              "kernels launched as kernel[1]: NEURON_LOGICAL_NC_CONFIG must be 1")
    return out


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
    rule = autoselect.neuron_name_rule()
    return {
        "entry_point": eps[0] if eps else None,
        "enabled": os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "1") == "1",
        "neuron_name_owner": rule.owner,
        "neuron_name_why": rule.why,
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
    if r.get("device_path"):
        show("device path", r["device_path"])
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
    show("name 'neuron' owner", f"{a['neuron_name_owner']} ({a['neuron_name_why']})")
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


def add_doctor_parser(sub: Any) -> None:
    doctor = sub.add_parser("doctor", help="show target, runtime, host detection, versions, cache dir "
                                           "and backend registration")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.set_defaults(func=_cmd_doctor)
