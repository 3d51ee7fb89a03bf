"""Static audit of generated sources that arrive from elsewhere (``cache import``).

Entries are code that runs at the next compile. A signature or ``--trust`` says who made an archive;
this says what its code can do: the kernel module must pass the NKI allowlist the compiler checks its
own output with, and the host wrapper must have the shape the wrapper generator emits (imports of
torch and our host runtime only, calls of kernels / host helpers / ``torch.ops`` namespaces / a few
constructors, no dunder attributes, no ``open``/``exec``/``getattr`` and friends). Parsing is all it
does: nothing is executed.
"""
from __future__ import annotations

import ast
import re

_WRAPPER_IMPORTS = {"import torch", "from neuron_inductor.runtime import host"}
_CALLS = re.compile(
    r"^(kernels\.[A-Za-z_][A-Za-z0-9_]*"
    r"|host\.(hbm|view|empty|count_fallback|count_collective|load_sibling|user_result|conform)"
    r"|torch\.(as_strided|tensor|empty|device|Size)"
    r"|torch\.ops\.(aten|prims|_c10d_functional|c10d_functional|neuron[A-Za-z0-9_]*)"
    r"\.[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?"
    r"|args\.clear|float|complex|int|bool)$")
_TORCH_ATTRS = re.compile(r"^torch\.(float|bfloat|int|uint|bool|complex|half|double|long|short|cfloat"
                          r"|strided|contiguous_format|channels_last|preserve_format)[A-Za-z0-9_]*$")
_FORBIDDEN = frozenset({"__import__", "eval", "exec", "compile", "open", "getattr", "setattr",
                        "delattr", "globals", "locals", "vars", "__builtins__", "breakpoint", "input",
                        "memoryview", "type", "object", "super", "help", "exit", "quit"})


class AuditError(ValueError):
    """A generated source does not have the shape our compiler emits."""


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _fail(name: str, node: ast.AST, why: str) -> None:
    raise AuditError(f"{name} line {getattr(node, 'lineno', '?')}: {why}")


def audit_wrapper(src: str, name: str = "wrapper.py") -> None:
    """Raise :class:`AuditError` unless ``src`` looks like a wrapper our generator wrote."""
    try:
        tree = ast.parse(src)
    except SyntaxError as e:
        raise AuditError(f"{name} does not parse: {e}") from e
    body = tree.body[1:] if tree.body and isinstance(tree.body[0], ast.Expr) and \
        isinstance(getattr(tree.body[0], "value", None), ast.Constant) else tree.body
    defs = 0
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if ast.unparse(node) not in _WRAPPER_IMPORTS:
                _fail(name, node, f"import not allowed: {ast.unparse(node)!r}")
        elif isinstance(node, ast.Assign):
            _check_expr(name, node)
        elif isinstance(node, ast.FunctionDef) and node.name == "call" and not node.decorator_list:
            defs += 1
            a = node.args
            if [x.arg for x in a.args] != ["args"] or a.vararg or a.kwarg or a.kwonlyargs or a.defaults:
                _fail(name, node, "call must take exactly (args)")
            for stmt in node.body:
                if not isinstance(stmt, (ast.Assign, ast.Expr, ast.Return)):
                    _fail(name, stmt, f"statement not allowed in call: {type(stmt).__name__}")
                _check_expr(name, stmt)
        else:
            _fail(name, node, f"module-level {type(node).__name__} not allowed")
    if defs != 1:
        raise AuditError(f"{name}: expected exactly one `def call(args)`")


def _check_expr(name: str, root: ast.AST) -> None:
    for node in ast.walk(root):
        if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom,
                             ast.Global, ast.Nonlocal, ast.Await, ast.Yield, ast.YieldFrom,
                             ast.NamedExpr, ast.ListComp, ast.GeneratorExp, ast.DictComp, ast.SetComp)):
            _fail(name, node, f"{type(node).__name__} not allowed")
        if isinstance(node, ast.Name) and (node.id in _FORBIDDEN or
                                           (node.id.startswith("__") and node.id != "__file__")):
            _fail(name, node, f"name not allowed: {node.id}")
        if isinstance(node, ast.Attribute):
            if node.attr.startswith("__"):
                _fail(name, node, f"attribute not allowed: {node.attr}")
            dotted = _dotted(node)
            if dotted is None:
                _fail(name, node, f"attribute of a computed value: .{node.attr}")
        if isinstance(node, ast.Call):
            func = _dotted(node.func)
            if func is None or not _CALLS.match(func):
                _fail(name, node, f"call not allowed: {ast.unparse(node.func)}")
    for node in ast.walk(root):  # torch.<name> outside a call: dtypes and layouts only
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.value.id == "torch" and node.attr not in ("ops", "as_strided", "tensor", "empty",
                                                               "device", "Size"):
            if not _TORCH_ATTRS.match(f"torch.{node.attr}"):
                _fail(name, node, f"torch attribute not allowed: torch.{node.attr}")


def audit_kernels(src: str) -> None:
    """The compiler's own NKI allowlist (imports nothing from torch: safe for the CLI)."""
    from neuron_inductor.codegen.check import KernelCheckError, check_kernel_source

    try:
        check_kernel_source(src)
    except KernelCheckError as e:
        raise AuditError(f"kernels.py: {e}") from e


def audit_sources(files: dict[str, bytes]) -> None:
    """Audit every ``.py`` file of an entry; :class:`AuditError` names the first problem."""
    for fname, data in sorted(files.items()):
        if not fname.endswith(".py"):
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise AuditError(f"{fname} is not UTF-8 text") from e
        if fname == "kernels.py":
            audit_kernels(text)
        elif fname == "wrapper.py":
            audit_wrapper(text)
        else:
            raise AuditError(f"unexpected source file {fname}")


__all__ = ["AuditError", "audit_wrapper", "audit_kernels", "audit_sources"]
