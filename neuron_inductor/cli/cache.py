"""``neuron-inductor cache ...``: see, check and manage the compile cache.

Human-readable tables by default, ``--json`` for scripts. Exit codes: 0 ok, 1 a problem was found
(bad entries, unknown key, insecure dir, bad import), 2 usage error. ``cli/__init__.py`` mounts this with
:func:`add_cache_parser` and dispatches to :func:`run_cache`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from neuron_inductor.cache import manage, transfer
from neuron_inductor.cache.store import META, PLAN, RECORD, CacheSecurityError, Store, default_root

SIGN_KEY_ENV = "NEURON_INDUCTOR_CACHE_SIGN_KEY"


class UsageError(Exception):
    pass


def add_cache_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``cache`` command group to a parent's ``add_subparsers()`` object."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--cache-dir", default=argparse.SUPPRESS,
                        help="cache directory (default: $NEURON_INDUCTOR_CACHE_DIR or "
                             "~/.cache/neuron_inductor)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="machine-readable output")
    p = subparsers.add_parser("cache", parents=[common], help="inspect and manage the compile cache",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(_cache_parser=p)
    sub = p.add_subparsers(dest="cache_command", metavar="SUBCOMMAND")

    def add(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], help=help, description=help)

    s = add("list", "one row per entry: key, graph, inputs, kind, kernels, size, age, hits")
    s.add_argument("--shape", help="only entries with an input of this shape, e.g. 4x128x64")
    s.add_argument("--model", help="only entries whose graph name or summary contains this")
    s.add_argument("--older-than", help="only entries unused for this long (90s, 30m, 12h, 7d)")
    s = add("show", "the key record, metadata, cost counters and kernel sources of one entry")
    s.add_argument("key", help="key or unique key prefix")
    s.add_argument("--cost", action="store_true", help="only the modelled per-kernel cost table")
    add("stats", "entries, size, hits and misses (all processes), by package version")
    s = add("verify", "check every entry's checksums")
    s.add_argument("--remove", action="store_true", help="delete the entries that fail")
    s = add("prune", "remove entries by size cap (LRU), age or package version")
    s.add_argument("--max-size", help="shrink to this size, least recently used first (10G, 500M)")
    s.add_argument("--older-than", help="remove entries unused for this long (12h, 7d, 2w)")
    s.add_argument("--old-versions", action="store_true",
                   help="remove entries built by other neuron_inductor sources or cache schemas")
    s.add_argument("--dry-run", action="store_true", help="only show what would be removed")
    s = add("clear", "remove every entry")
    s.add_argument("--yes", action="store_true", help="do not ask")
    s.add_argument("--dry-run", action="store_true", help="only show what would be removed")
    s = add("explain", "why did a graph miss? diff its key record against the nearest entry")
    s.add_argument("key", nargs="?", help="an entry's key or prefix (default: the newest entry)")
    s.add_argument("--record", help="a key record JSON file (record.json) to explain instead")
    sign_help = (f"shared secret key file for the archive's HMAC signature (default: ${SIGN_KEY_ENV}); "
                 "make one with `cache keygen`")
    s = add("export", "write verified entries to a .tar.gz (to warm other machines)")
    s.add_argument("file")
    s.add_argument("--key", action="append", help="only this key or prefix (repeatable)")
    s.add_argument("--sign-key", help=sign_help)
    s = add("import", "check a .tar.gz made by export and install its entries if it is trusted: signed "
                      "with --sign-key, or --trust after reviewing --dry-run")
    s.add_argument("file")
    s.add_argument("--dry-run", action="store_true",
                   help="list every key, graph name and file the archive would install; install nothing")
    s.add_argument("--trust", action="store_true",
                   help="install an unsigned archive (after reviewing it with --dry-run)")
    s.add_argument("--sign-key", help=sign_help)
    s = add("keygen", "write a new random signing key file (mode 0600) to share with trusted machines")
    s.add_argument("file")
    add("adopt", "claim an existing non-empty directory without the cache marker as a compile cache "
                 "(only for a cache made by a version that wrote no marker)")
    return p


def run_cache(args: argparse.Namespace) -> int:
    """Run a parsed ``cache`` command; returns the exit code."""
    cmd = getattr(args, "cache_command", None)
    if cmd is None:
        args._cache_parser.print_help(sys.stderr)
        return 2
    handler = _COMMANDS[cmd]
    root = Path(getattr(args, "cache_dir", None) or default_root(_config()))
    try:
        return handler(args, root)
    except BrokenPipeError:  # `... | head`: the reader went away, which is not our failure
        sys.stdout = open(os.devnull, "w")
        return 0
    except UsageError as e:
        print(f"neuron-inductor cache {cmd}: error: {e}", file=sys.stderr)
        return 2
    except (CacheSecurityError, transfer.ArchiveError) as e:
        print(f"neuron-inductor cache {cmd}: {e}", file=sys.stderr)
        return 1


def _config() -> Any:
    from neuron_inductor.config import get_config

    return get_config()


def _store(root: Path, create: bool = False) -> Store | None:
    """The cache at ``root`` (None when absent and not to be created). Refuses a non-empty directory
    without the marker (``Store``); sweeps the staging dirs of killed imports and writers."""
    if not os.path.lexists(root) and not create:
        return None
    store = Store(root, create=create)
    store.sweep_temps()
    return store


def _emit(args: argparse.Namespace, data: Any, human: Callable[[], None]) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, default=str))
    else:
        human()


def _table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())


def _shapes(shapes: list, limit: int = 4) -> str:
    text = " ".join(manage.shape_text(s) for s in shapes[:limit])
    return text + (f" (+{len(shapes) - limit})" if len(shapes) > limit else "")


def _ago(t: float | None) -> str:
    return "-" if not t else manage.human_age(time.time() - t) + " ago"


def _age_arg(text: str | None) -> float | None:
    try:
        return None if text is None else manage.parse_age(text)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _resolve(store: Store | None, prefix: str) -> Any:
    matches = store.find(prefix) if store is not None else []
    if not matches:
        return None
    if len(matches) > 1:
        raise UsageError(f"key prefix {prefix!r} is ambiguous: "
                         + ", ".join(m.key[:12] for m in matches[:5]))
    return matches[0]


# -- commands ---------------------------------------------------------------------------------------
def _cmd_list(args: argparse.Namespace, root: Path) -> int:
    store = _store(root)
    older = _age_arg(args.older_than)
    rows = [manage.entry_row(e) for e in (store.entries() if store else [])]
    rows = [r for r in rows if manage.matches(r, args.shape, args.model, older)]
    rows.sort(key=lambda r: r["created"])

    def human() -> None:
        if not rows:
            print(f"no cache entries in {root}")
            return
        _table([[r["key"][:12], r["graph_name"], r["kind"],
                 _shapes(r["input_shapes"]), ",".join(r["dtype"]),
                 str(r["n_kernels"] if r["n_kernels"] is not None else "?"), manage.human_size(r["size"]),
                 _ago(r["created"]), _ago(r["last_hit"]), str(r["hits"]), r["summary"][:48]]
                for r in rows],
               ["KEY", "GRAPH", "KIND", "INPUTS", "DTYPE", "KERNELS", "SIZE", "CREATED", "LAST HIT",
                "HITS", "SUMMARY"])
        print(f"{len(rows)} entries, {manage.human_size(sum(r['size'] for r in rows))}")

    _emit(args, rows, human)
    return 0


def _cmd_show(args: argparse.Namespace, root: Path) -> int:
    e = _resolve(_store(root), args.key)
    if e is None:
        print(f"no cache entry with key {args.key!r} in {root}", file=sys.stderr)
        return 1
    meta, record = e.read_json(META), e.read_json(RECORD)
    files = (e.manifest or {}).get("files", {})
    sources = {n: (e.path / n).read_text(errors="replace") for n in sorted(files)
               if n.endswith(".py") or n == PLAN}
    cost = meta.get("cost")
    data = {"key": e.key, "path": str(e.path), "manifest": e.manifest, "record": record, "meta": meta,
            "hits": e.hits, "sources": sources}
    if args.cost:
        data = {"key": e.key, "cost": cost}

    def human() -> None:
        if not args.cost:
            print(f"key      {e.key}\npath     {e.path}\nsize     {manage.human_size(e.size)}   "
                  f"created {_ago(e.created)}   last hit {_ago(e.last_used if e.hits else None)}   "
                  f"hits {e.hits}")
            print("\n== meta ==")
            for k, v in sorted(meta.items()):
                if k != "cost":
                    print(f"  {k:<18} {v}")
            print("\n== key record ==")
            for k, v in manage.flatten_record_for_show(record):
                print(f"  {k:<18} {v}")
        print("\n== cost ==" if not args.cost else f"cost counters of {e.key[:12]}")
        _print_cost(cost)
        if not args.cost:
            for name, text in sources.items():
                print(f"\n== {name} ==\n{text.rstrip()}")

    _emit(args, data, human)
    return 0


def _print_cost(cost: Any) -> None:
    from neuron_inductor.costmodel.summary import format_cost_summary, is_cost_summary

    if not cost:
        print("  (no cost counters recorded for this entry)")
    elif is_cost_summary(cost):
        print(format_cost_summary(cost))
    elif isinstance(cost, dict) and all(isinstance(v, dict) for v in cost.values()):
        cols = sorted({c for v in cost.values() for c in v})
        _table([[k, *[str(v.get(c, "")) for c in cols]] for k, v in cost.items()], ["", *cols])
    elif isinstance(cost, dict):
        _table([[k, str(v)] for k, v in cost.items()], ["COUNTER", "VALUE"])
    else:
        print(f"  {cost}")


def _cmd_stats(args: argparse.Namespace, root: Path) -> int:
    from neuron_inductor.stats import read_persisted

    store = _store(root)
    infos = list(store.entries(all_versions=True)) if store else []
    by_version: dict[str, dict] = {}
    for e in infos:
        v = by_version.setdefault((e.manifest or {}).get("package_version") or "?",
                                  {"entries": 0, "bytes": 0})
        v["entries"] += 1
        v["bytes"] += e.size
    counters = read_persisted(root) if store else {}
    total: dict[str, float] = {}
    for c in counters.values():
        for k, n in c.items():
            total[k] = total.get(k, 0) + n
    hits, misses = total.get("hits", 0), total.get("misses", 0)
    quarantine = root / "quarantine"
    data = {"cache_dir": str(root), "entries": len(infos), "bytes": sum(e.size for e in infos),
            "max_bytes": _config().cache_max_bytes, "hits": hits, "misses": misses,
            "hit_rate": hits / (hits + misses) if hits + misses else None,
            "counters": total, "counters_by_version": counters, "entries_by_version": by_version,
            "quarantined_on_disk": len(list(quarantine.iterdir())) if quarantine.is_dir() else 0,
            "temp_dirs": len(list(root.glob(".import-*")) + list(root.glob("v*/*/.tmp-*"))) if store else 0}

    def human() -> None:
        print(f"cache directory          {root}")
        print(f"entries                  {data['entries']}")
        print(f"size                     {manage.human_size(data['bytes'])} "
              f"(max {manage.human_size(data['max_bytes'])})")
        rate = f"{100 * data['hit_rate']:.1f} %" if data["hit_rate"] is not None else "-"
        print(f"hits                     {hits:.0f}\nmisses                   {misses:.0f}\n"
              f"hit rate                 {rate}")
        for k in sorted(total):
            if k not in ("hits", "misses"):
                print(f"{k.replace('_', ' '):<24} {total[k]:g}")
        print(f"quarantined on disk      {data['quarantined_on_disk']}")
        print(f"temp dirs                {data['temp_dirs']} (unfinished writes and imports; swept "
              "when their process is gone or after an hour)")
        if by_version or counters:
            print("by package version:")
            for v in sorted(set(by_version) | set(counters)):
                bv, cv = by_version.get(v, {}), counters.get(v, {})
                print(f"  {v:<10} {bv.get('entries', 0)} entries, "
                      f"{manage.human_size(bv.get('bytes', 0))}, {cv.get('hits', 0):.0f} hits, "
                      f"{cv.get('misses', 0):.0f} misses")

    _emit(args, data, human)
    return 0


def _cmd_verify(args: argparse.Namespace, root: Path) -> int:
    store = _store(root)
    results = manage.verify_all(store) if store else []
    bad = [r for r in results if not r["ok"]]
    if args.remove:
        for r in bad:
            store.remove(Path(r["path"]))  # type: ignore[union-attr]
            r["removed"] = True

    def human() -> None:
        for r in bad:
            print(f"BAD  {r['key'][:12]}  {r['problem']}{'  (removed)' if r.get('removed') else ''}")
        print(f"{len(results) - len(bad)} ok, {len(bad)} bad")
        if bad and not args.remove:
            print("run `neuron-inductor cache verify --remove` to delete the bad entries")

    _emit(args, {"checked": len(results), "bad": bad}, human)
    return 1 if bad else 0


def _cmd_prune(args: argparse.Namespace, root: Path) -> int:
    store = _store(root)
    try:
        max_size = manage.parse_size(args.max_size) if args.max_size else None
    except ValueError as e:
        raise UsageError(str(e)) from None
    older = _age_arg(args.older_than)
    if max_size is None and older is None and not args.old_versions:
        max_size = _config().cache_max_bytes  # like `ccache -c`: enforce the configured cap
    if store:
        store.require_marker()
    plan = manage.plan_prune(store, max_size, older, args.old_versions) if store else manage.PrunePlan()
    if store and not args.dry_run:
        manage.apply_prune(store, plan)
    rows = [{"key": e.key, "size": e.size, "reason": plan.reasons[e.key]} for e in plan.remove]

    def human() -> None:
        verb = "would remove" if args.dry_run else "removed"
        for r in rows:
            print(f"{verb} {r['key'][:12]}  {manage.human_size(r['size'])}  {r['reason']}")
        for p in plan.other_dirs:
            print(f"{verb} {p} (other cache schema)")
        print(f"{verb} {len(rows)} entries, {manage.human_size(plan.bytes)}")

    _emit(args, {"dry_run": args.dry_run, "removed": rows, "bytes": plan.bytes,
                 "other_dirs": [str(p) for p in plan.other_dirs]}, human)
    return 0


def _cmd_clear(args: argparse.Namespace, root: Path) -> int:
    store = _store(root)
    if store is None:
        _emit(args, {"removed": 0, "bytes": 0}, lambda: print(f"nothing to clear in {root}"))
        return 0
    store.require_marker()
    if args.dry_run:
        infos, extra = manage.plan_clear(store)
        rows = [{"key": e.key, "path": str(e.path), "size": e.size} for e in infos]

        def human() -> None:
            for r in rows:
                print(f"would remove {r['path']}  {manage.human_size(r['size'])}")
            for p in extra:
                print(f"would remove {p}")
            print(f"would remove {len(rows)} entries, {manage.human_size(sum(e.size for e in infos))}")

        _emit(args, {"dry_run": True, "removed": rows, "other": [str(p) for p in extra]}, human)
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError("refusing to clear without --yes (stdin is not a terminal)")
        if input(f"remove every entry in {root}? [y/N] ").strip().lower() not in ("y", "yes"):
            return 0
    n, size = manage.clear(store)
    _emit(args, {"removed": n, "bytes": size},
          lambda: print(f"removed {n} entries, {manage.human_size(size)} from {root}"))
    return 0


def _cmd_explain(args: argparse.Namespace, root: Path) -> int:
    store = _store(root)
    exclude = None
    if args.record:
        try:
            from neuron_inductor.cache import validate

            record = validate.record(validate.read_json(Path(args.record), "record.json"))
        except (OSError, ValueError) as e:
            raise UsageError(f"cannot read record {args.record}: {e}") from None
        from neuron_inductor.cache.schema import key_of

        exclude_hit = key_of(record)
        if store is not None and store.entry_dir(exclude_hit).is_dir():
            _emit(args, {"key": exclude_hit, "exact_match": True, "differences": []},
                  lambda: print(f"an entry with exactly this key exists ({exclude_hit[:12]}): it hits"))
            return 0
    else:
        entries = list(store.entries()) if store else []
        if args.key:
            e = _resolve(store, args.key)
        else:
            e = max(entries, key=lambda x: x.created) if entries else None
        if e is None:
            print(f"no cache entry {'with key ' + repr(args.key) if args.key else ''} in {root}",
                  file=sys.stderr)
            return 1
        record, exclude = e.read_json(RECORD), e.key
    near, diff = manage.nearest(store, record, exclude=exclude) if store else (None, [])
    diff = manage.summarise_graph_diff(diff)
    data = {"nearest": near.key if near else None, "differences":
            [{"field": f, "this": a, "nearest": b} for f, a, b in diff]}

    def human() -> None:
        if near is None:
            print("no other entry to compare with: this graph was the first of its kind")
            return
        meta = near.read_json(META)
        print(f"nearest entry {near.key[:12]} ({meta.get('graph_name', '?')}, {meta.get('kind', '?')}) "
              f"differs in {len(diff)} field(s):")
        _table([[f, _short(a), _short(b)] for f, a, b in diff[:40]], ["FIELD", "THIS", "NEAREST"])
        if len(diff) > 40:
            print(f"... {len(diff) - 40} more (all of them with --json)")

    _emit(args, data, human)
    return 0


def _short(v: Any, n: int = 70) -> str:
    s = v if isinstance(v, str) else json.dumps(v)
    return s if len(s) <= n else s[: n - 3] + "..."


def _sign_key(args: argparse.Namespace) -> bytes | None:
    path = getattr(args, "sign_key", None) or os.environ.get(SIGN_KEY_ENV)
    return transfer.read_key(path) if path else None


def _cmd_export(args: argparse.Namespace, root: Path) -> int:
    store = _store(root)
    if store is None:
        raise UsageError(f"no cache at {root}")
    keys = None
    if args.key:
        keys = []
        for k in args.key:
            found = store.find(k)
            if not found:
                raise UsageError(f"no cache entry with key {k!r} in {root}; nothing exported")
            keys += [e.key for e in found]
    res = transfer.export(store, Path(args.file), keys, sign_key=_sign_key(args))
    _emit(args, res, lambda: print(f"exported {len(res['exported'])} entries to {args.file}"
                                   + (" (signed)" if res["signed"] else " (unsigned)")
                                   + (f"; skipped {len(res['skipped'])} bad" if res["skipped"] else "")
                                   + (f"; kept {len(res['local_only'])} local-only (Dynamo plans, graphs "
                                      "with hand-written kernels: not regenerable elsewhere)"
                                      if res["local_only"] else "")))
    return 1 if res["skipped"] else 0


def _cmd_import(args: argparse.Namespace, root: Path) -> int:
    if not Path(args.file).is_file():
        raise UsageError(f"no such file {args.file}")
    store = _store(root, create=True)
    assert store is not None
    res = transfer.import_(store, Path(args.file), trust=args.trust, dry_run=args.dry_run,
                           sign_key=_sign_key(args))

    def human() -> None:
        print(f"archive {args.file}: signature {res['signature']}")
        for e in res["entries"]:
            print(f"{'ok ' if e['ok'] else 'BAD'}  {e['key']}  {e['graph_name']}  {e['kind']}")
            for name, size in e["files"].items():
                print(f"       {name}  {manage.human_size(size)}")
            if e["problem"]:
                print(f"       refused: {e['problem']}")
        for b in res["bad"]:
            if not any(e["key"] == b["key"] for e in res["entries"]):
                print(f"BAD  {b['key']}  {b['problem']}")
        if args.dry_run:
            print(f"dry run: {len(res['entries']) - len(res['bad'])} entries would be installed, "
                  f"{len(res['bad'])} refused; nothing was written")
        elif not res["trusted"]:
            print("nothing installed: the archive is not signed with your key. Review the list above; "
                  "if you trust every file, run again with --trust (or import a signed archive with "
                  "--sign-key)", file=sys.stderr)
        else:
            print(f"imported {len(res['imported'])}, already present {len(res['already_present'])}, "
                  f"rejected {len(res['bad'])}")

    _emit(args, res, human)
    if res["bad"]:
        return 1
    return 0 if args.dry_run or res["trusted"] else 1


def _cmd_keygen(args: argparse.Namespace, root: Path) -> int:
    try:
        p = transfer.make_key(args.file)
    except FileExistsError:
        raise UsageError(f"{args.file} exists; refusing to overwrite a key") from None
    except OSError as e:
        raise UsageError(f"cannot write {args.file}: {e}") from None
    _emit(args, {"key_file": str(p)}, lambda: print(
        f"wrote {p} (mode 0600). Copy it to the machines you trust (never inside an archive) and pass "
        f"--sign-key {p} (or set {SIGN_KEY_ENV}) to export and import"))
    return 0


def _cmd_adopt(args: argparse.Namespace, root: Path) -> int:
    from neuron_inductor.cache.store import MARKER, check_secure, is_marked, write_marker

    if not root.is_dir() or root.is_symlink():
        raise UsageError(f"{root} is not a directory")
    check_secure(root)
    if is_marked(root):
        _emit(args, {"adopted": str(root), "already": True}, lambda: print(f"{root} is already a cache"))
        return 0
    names = sorted(p.name for p in root.iterdir())
    write_marker(root)
    _emit(args, {"adopted": str(root), "already": False, "contents": names}, lambda: print(
        f"wrote {root / MARKER}: neuron_inductor now treats {root} as its cache and its commands "
        f"(prune, clear) may delete there. It holds: {', '.join(names[:10])}"
        + (f" (+{len(names) - 10})" if len(names) > 10 else "")))
    return 0


_COMMANDS: dict[str, Callable[[argparse.Namespace, Path], int]] = {
    "list": _cmd_list, "show": _cmd_show, "stats": _cmd_stats, "verify": _cmd_verify,
    "prune": _cmd_prune, "clear": _cmd_clear, "explain": _cmd_explain, "export": _cmd_export,
    "import": _cmd_import, "keygen": _cmd_keygen, "adopt": _cmd_adopt,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry (``python -m neuron_inductor.cli.cache list``), same as ``neuron-inductor cache``."""
    parser = argparse.ArgumentParser(prog="neuron-inductor")
    add_cache_parser(parser.add_subparsers(dest="command"))
    try:
        args = parser.parse_args(["cache", *(argv if argv is not None else sys.argv[1:])])
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    return run_cache(args)


__all__ = ["add_cache_parser", "run_cache", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
