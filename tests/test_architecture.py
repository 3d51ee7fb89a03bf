"""The package's shape, checked: no import cycles, data flows down the pipeline, small modules.

Import graph. Every ``import`` / ``from ... import`` in ``neuron_inductor/`` is an edge, wherever
it appears (module level, inside a function, under ``if TYPE_CHECKING:``): a lazy import hides a
dependency from the interpreter, not from the reader. ``from pkg import name`` is an edge to
``pkg.name`` when that is a module, else to ``pkg``; the implicit import of parent packages is not
an edge (Python always runs it and it carries no dependency of the importing code).

Stage rule. The layers are ``backend -> cache -> pipeline -> graph -> lowering -> ir -> codegen ->
runtime`` (README.md, "How it works"; the top-level packages/modules of those names, plus
``dynamic.py`` and ``compile.py`` which are part of the backend). ``pipeline.py`` sits below the
cache (the cache calls it on a miss, through ``compile.py``) and above the stages it runs. A module of stage *i* may import a module of stage
*j* when

* ``j >= i``: its own stage or a later one (a stage builds the next stage's data and calls it), or
* ``j == i - 1`` and the imported module is one of the previous stage's *data-type* modules
  (:data:`DATA_TYPES`): a consumer reads the types its producer hands it (codegen reads the
  ``ir`` nodes, the host program and their text). Lowering needs nothing from ``graph`` but the
  FX graph itself, which is torch's; the runtime reads the generated modules as text.

Anything else is a lower stage reaching back into a higher one. Leaf side modules
(:data:`LEAVES`: config, target, the instruction spec) may be imported by any stage and import no
stage themselves. Modules outside the stages (cli, integrations, costmodel, ...) are only held to
the no-cycle rule.

Allow-lists (:data:`ALLOWED_EDGES`, :data:`LONG_FILES`, :data:`BIG_CLASSES`) record what is not
fixed yet. Each entry must still be true: a test fails when an allowed edge disappears or a file or
class shrinks below its recorded size, so the lists only ever shrink (delete the entry, or lower
the number, in the change that fixes it).
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

PKG = Path(__file__).resolve().parent.parent / "neuron_inductor"

STAGES = ("backend", "cache", "pipeline", "graph", "lowering", "ir", "codegen", "runtime")
STAGE_ALIASES = {"dynamic": "backend", "compile": "backend"}
LEAVES = ("config", "target", "spec", "stats")

#: modules of a stage that a consumer one stage down may import (the data it is handed)
DATA_TYPES = {
    "ir": {"neuron_inductor.ir", "neuron_inductor.ir.nodes", "neuron_inductor.ir.program",
           "neuron_inductor.ir.exprs", "neuron_inductor.ir.text"},
}

#: edges that break the stage rule and are not fixed yet (each entry must still exist; shrink only)
ALLOWED_EDGES: set[tuple[str, str]] = set()


#: files over MAX_LINES lines, with their current length (shrink only)
MAX_LINES = 600
LONG_FILES: dict[str, int] = {}

#: functions (methods, nested functions) over MAX_FUNC_LINES lines, with their length (shrink only)
MAX_FUNC_LINES = 80
LONG_FUNCTIONS: dict[str, int] = {}

#: underscore names imported from another module of the package, by importing file (shrink only)
PRIVATE_IMPORTS: dict[str, set[str]] = {}

#: classes with more than MAX_METHODS methods, with their current count (shrink only)
MAX_METHODS = 20
BIG_CLASSES: dict[str, int] = {}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _targets(node: ast.AST, pkg: str, mods: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        out = []
        for a in node.names:
            name = a.name
            while name and name not in mods:  # ``import a.b.c`` of a non-module attribute path
                name = name.rpartition(".")[0]
            out.append(name)
        return [n for n in out if n]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
        src = ".".join(base + ([node.module] if node.module else []))
    else:
        src = node.module or ""
    out = []
    for a in node.names:
        sub = f"{src}.{a.name}"
        out.append(sub if sub in mods else src)
    return [n for n in out if n in mods]


def import_graph() -> nx.DiGraph:
    mods = _modules()
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for t in _targets(node, pkg, mods):
                    if t != name:
                        g.add_edge(name, t)
    return g


def stage_of(module: str) -> str | None:
    top = module.split(".")[1] if "." in module else ""
    top = STAGE_ALIASES.get(top, top)
    return top if top in STAGES else None


def _edge_ok(a: str, b: str) -> bool:
    sa, sb = stage_of(a), stage_of(b)
    if sa is None or sb is None:
        return True
    i, j = STAGES.index(sa), STAGES.index(sb)
    return j >= i or (j == i - 1 and b in DATA_TYPES.get(sb, ()))


GRAPH = import_graph()


def test_allowed_edges_still_exist():
    """An allow-listed edge that no longer exists must leave the list (it only shrinks)."""
    gone = sorted(e for e in ALLOWED_EDGES if not GRAPH.has_edge(*e))
    assert not gone, f"these edges are gone, delete them from ALLOWED_EDGES: {gone}"


def test_no_import_cycles():
    g = GRAPH.copy()
    g.remove_edges_from(ALLOWED_EDGES)
    cycles = sorted(sorted(c) for c in nx.simple_cycles(g))
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles[:20])


def test_stages_import_downward_only():
    bad = sorted((a, b) for a, b in GRAPH.edges if (a, b) not in ALLOWED_EDGES and not _edge_ok(a, b))
    assert not bad, "a later stage imports an earlier one:\n" + "\n".join(f"{a} -> {b}" for a, b in bad)


@pytest.mark.parametrize("leaf", LEAVES)
def test_leaf_modules_import_no_stage(leaf):
    mod = f"neuron_inductor.{leaf}"
    own = [m for m in GRAPH if m == mod or m.startswith(mod + ".")]
    bad = sorted((a, b) for a in own for b in GRAPH.successors(a) if stage_of(b) is not None)
    assert not bad, f"leaf module imports a pipeline stage: {bad}"


def test_graph_sees_function_level_and_from_package_imports():
    """The checks above are only as good as the graph: it must see lazy imports and resolve
    ``from . import submodule`` to the submodule."""
    assert GRAPH.has_edge("neuron_inductor.backend", "neuron_inductor.dynamic")  # inside a function
    assert GRAPH.has_edge("neuron_inductor.codegen.kernel", "neuron_inductor.spec")  # from .. import spec
    assert not _edge_ok("neuron_inductor.ir.nodes", "neuron_inductor.lowering.graph")
    assert not _edge_ok("neuron_inductor.runtime.host", "neuron_inductor.backend")
    assert _edge_ok("neuron_inductor.codegen.kernel", "neuron_inductor.ir.nodes")


BENCH = PKG.parent / "benchmarks"


def _is_script(path: Path) -> bool:
    """A benchmark script runs as ``python benchmarks/NAME.py``: it has an ``if __name__ ==
    "__main__"`` block. Every other module in benchmarks/ is a helper shared by the scripts."""
    return any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)
               for n in ast.parse(path.read_text()).body)


def _bench_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_benchmarks_import_no_other_benchmark_script():
    """Rule: a benchmark script imports helpers (benchmarks/ modules without a ``__main__`` block,
    e.g. ``_models.py``, ``arch_checks.py``), never another script, and helpers import no script;
    no module in benchmarks/ shares its name with an installed top-level package (a script run from
    benchmarks/ would shadow it for every library that imports it)."""
    import importlib.machinery
    import sys

    mods = {p.stem: p for p in BENCH.glob("*.py")}
    scripts = {name for name, p in mods.items() if _is_script(p)}
    bad = sorted(f"{name} imports {dep}" for name, p in mods.items()
                 for dep in _bench_imports(p) & scripts if dep != name)
    assert not bad, bad
    repo = PKG.parent.resolve()
    # PathFinder searches the given path only: a benchmark module another test already imported
    # (it is then in sys.modules) must not count as an installed package.
    path = [p for p in sys.path if repo not in Path(p or ".").resolve().parents
            and Path(p or ".").resolve() != repo]
    shadowing = sorted(n for n in mods if n in sys.stdlib_module_names or (
        not n.startswith("_") and importlib.machinery.PathFinder.find_spec(n, path) is not None))
    assert not shadowing, f"benchmarks/ modules named like installed packages: {shadowing}"


def test_benchmark_rule_sees_a_script_import(tmp_path):
    (tmp_path / "a.py").write_text("import b\nif __name__ == '__main__':\n    pass\n")
    (tmp_path / "b.py").write_text("x = 1\nif __name__ == '__main__':\n    print(x)\n")
    assert _is_script(tmp_path / "b.py") and _bench_imports(tmp_path / "a.py") == {"b"}


def _line_counts() -> dict[str, int]:
    return {str(p.relative_to(PKG.parent)): len(p.read_text().splitlines()) for p in PKG.rglob("*.py")}


def test_no_file_over_max_lines():
    counts = _line_counts()
    over = {f: n for f, n in counts.items() if n > MAX_LINES and LONG_FILES.get(f, 0) < n}
    assert not over, f"files over {MAX_LINES} lines (split them; the allow-list only shrinks): {over}"


def test_long_file_allow_list_only_shrinks():
    counts = _line_counts()
    stale = {f: (n, counts.get(f)) for f, n in LONG_FILES.items() if counts.get(f, 0) < n}
    assert not stale, f"shorter now: lower or delete these LONG_FILES entries (recorded, actual): {stale}"


def _method_counts() -> dict[str, int]:
    out = {}
    for p in PKG.rglob("*.py"):
        rel = str(p.relative_to(PKG.parent))
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ClassDef):
                n = sum(isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) for b in node.body)
                out[f"{rel}::{node.name}"] = n
    return out


def test_no_class_over_max_methods():
    counts = _method_counts()
    over = {c: n for c, n in counts.items() if n > MAX_METHODS and BIG_CLASSES.get(c, 0) < n}
    assert not over, f"classes with more than {MAX_METHODS} methods (the allow-list only shrinks): {over}"


def test_big_class_allow_list_only_shrinks():
    counts = _method_counts()
    stale = {c: (n, counts.get(c)) for c, n in BIG_CLASSES.items() if counts.get(c, 0) < n}
    assert not stale, f"smaller now: lower or delete these BIG_CLASSES entries (recorded, actual): {stale}"


def test_pipeline_stages_in_order():
    """The compile pipeline reads top to bottom, and each stage takes what the previous one returns."""
    import typing

    from neuron_inductor import pipeline

    assert [s.__name__ for s in pipeline.STAGES] == [
        "passes", "partition", "lower", "verify", "codegen", "conform", "cost"]
    hints = [typing.get_type_hints(s) for s in pipeline.STAGES]
    assert hints[0][next(iter(hints[0]))] is pipeline.GraphJob
    assert hints[-1]["return"] is pipeline.Built
    for a, b, ha, hb in zip(pipeline.STAGES, pipeline.STAGES[1:], hints, hints[1:]):
        takes = [v for k, v in hb.items() if k != "return"]
        assert takes == [ha["return"]], f"{b.__name__} does not take what {a.__name__} returns"


def test_compile_runs_the_pipeline_list():
    """compile.py has no stage sequence of its own: it runs ``pipeline.run`` over ``STAGES``."""
    src = (PKG / "compile.py").read_text()
    assert "pipeline.run(" in src
    for stage in ("run_passes", "lower_graph", "generate_kernels_module", "check_conformance"):
        assert stage not in src, f"compile.py calls {stage} itself instead of through pipeline.STAGES"


def test_lowering_takes_groups_from_the_partitioner():
    """lower_graph receives the partitioner's groups; lowering imports nothing from the graph stage."""
    assert not [b for a, b in GRAPH.edges if stage_of(a) == "lowering" and stage_of(b) == "graph"]


def _trees():
    for p in sorted(PKG.rglob("*.py")):
        yield str(p.relative_to(PKG.parent)), ast.parse(p.read_text())


def _function_lengths() -> dict[str, int]:
    out: dict[str, int] = {}
    for rel, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                key = f"{rel}:{node.name}"
                out[key] = max(out.get(key, 0), n)
    return out


def test_no_function_over_max_lines():
    """Long functions hide their steps in closures; split them by what they do (plan, emit)."""
    lengths = _function_lengths()
    over = {f: n for f, n in lengths.items() if n > MAX_FUNC_LINES and LONG_FUNCTIONS.get(f, 0) < n}
    assert not over, f"functions over {MAX_FUNC_LINES} lines (split them; the allow-list only shrinks): {over}"
    stale = {f: n for f, n in LONG_FUNCTIONS.items() if lengths.get(f, 0) < n}
    assert not stale, f"shorter now: lower or drop their LONG_FUNCTIONS entries: {stale}"


def _private_imports() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for rel, tree in _trees():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level == 0 and not (node.module or "").startswith("neuron_inductor"):
                continue  # torch's and other libraries' private names are their business
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    out.setdefault(rel, set()).add(f"{'.' * node.level}{node.module or ''}:{a.name}")
    return out


def test_no_private_names_imported_across_modules():
    """A module's underscore names are its own: what another module needs is a public seam."""
    found = _private_imports()
    new = {f: sorted(v - PRIVATE_IMPORTS.get(f, set())) for f, v in found.items()}
    new = {f: v for f, v in new.items() if v}
    assert not new, f"private names imported across modules (make them public or move them): {new}"
    stale = {f: sorted(v - found.get(f, set())) for f, v in PRIVATE_IMPORTS.items()}
    stale = {f: v for f, v in stale.items() if v}
    assert not stale, f"no longer imported; drop from PRIVATE_IMPORTS: {stale}"


def test_one_lowering_registration_path():
    """Lowerings enter the registry through register_lowering only: no other decorator, and no
    writes into the kind tables outside the registry module."""
    tables = {"POINTWISE", "REDUCTIONS", "KERNELS", "LOWERINGS"}
    bad = []
    for rel, tree in _trees():
        if rel.endswith("lowering/registry.py"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in ("register_kernel", "register_pointwise"):
                bad.append(f"{rel}:{node.lineno} {node.id}")
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) \
                    and isinstance(node.value, ast.Name) and node.value.id in tables:
                bad.append(f"{rel}:{node.lineno} writes {node.value.id}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in tables \
                    and node.func.attr in ("update", "setdefault", "__setitem__"):
                bad.append(f"{rel}:{node.lineno} {node.func.value.id}.{node.func.attr}")
    assert not bad, f"lowerings registered outside register_lowering: {bad}"


def test_instructions_are_emitted_through_typed_methods():
    """No instruction is spelt as strings (``kb.instr("vector", "tensor_scalar", ...)``)."""
    hits = [f"{p.relative_to(PKG.parent)}" for p in PKG.rglob("*.py") if 'instr("' in p.read_text()]
    assert not hits, hits
