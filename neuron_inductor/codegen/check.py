"""Static proof that a generated kernel module stays inside the NKI subset.

An AST allowlist, not a blocklist: anything not explicitly allowed is refused. Inside ``@nki.jit``
functions the only calls are ``nl.*``, ``nisa.*``, ``<tensor>.ap(...)`` and the builtins min / max /
range / len (plus ``float('inf'|'-inf'|'nan')`` literals); arithmetic is ``+ - * // %`` and single
comparisons on ints; hand-written kernels (named by the caller) may also read ``<name>.shape`` /
``<name>.dtype`` to size their loops; the module imports nothing but the standard header and records
its target in one ``PLATFORM_TARGET = "<target>"`` assignment. This is what lets the same source run
on the real NKI toolchain and on our simulator, and it keeps host compute (torch / numpy) out of kernels.
"""
from __future__ import annotations

import ast
from typing import Iterable

from ..spec.namespace import allowed as nki_name_allowed
from .kernel import HEADER

ALLOWED_BUILTINS = frozenset({"min", "max", "range", "len"})
NKI_ROOTS = frozenset({"nl", "nisa"})
LOOP_ITERS = frozenset({"affine_range", "sequential_range", "static_range"})
INT_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
INT_CMPOPS = (ast.Gt, ast.GtE, ast.Lt, ast.LtE, ast.Eq, ast.NotEq)
FLOAT_LITERALS = frozenset({"inf", "-inf", "nan"})
#: tensor metadata a hand-written kernel may read (``n, d = x.shape``)
TENSOR_ATTRS = frozenset({"shape", "dtype"})
FORBIDDEN_NAMES = frozenset({"torch", "np", "numpy", "__import__", "eval", "exec", "compile", "open",
                             "getattr", "setattr", "globals", "locals", "vars", "__builtins__"})
#: the NKI modules: used only as ``nl.<name>`` / ``nisa.<name>`` (``spec/namespace.py``), never bare
MODULE_NAMES = frozenset({"nl", "nisa", "nki"})


class KernelCheckError(ValueError):
    """The kernel source uses something outside the allowlist; the message names line and construct."""


class _Checker:
    def __init__(self, src: str, user_kernels: frozenset[str] = frozenset()) -> None:
        self.src = src
        self.user_kernels = user_kernels
        self.tensor_attrs = False  # inside a hand-written kernel

    def fail(self, node: ast.AST, why: str) -> None:
        seg = ast.get_source_segment(self.src, node) or type(node).__name__
        seg = seg.splitlines()[0] if seg else seg
        raise KernelCheckError(f"line {getattr(node, 'lineno', '?')}: {why}: {seg!r}")

    # ---- module level
    def module(self, tree: ast.Module) -> None:
        body = list(tree.body)
        if body and _is_docstring(body[0]):
            body = body[1:]
        header = ast.parse(HEADER).body[0]
        seen_header = False
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                if ast.dump(node) != ast.dump(header) or seen_header:
                    self.fail(node, f"only the header import `{HEADER}` is allowed")
                seen_header = True
            elif isinstance(node, ast.FunctionDef):
                self.function(node)
            elif _is_target_record(node):
                pass
            else:
                self.fail(node, "only the header import and @nki.jit functions may appear at module level")
        if not seen_header:
            raise KernelCheckError(f"kernel module lacks the header `{HEADER}`")

    def function(self, fn: ast.FunctionDef) -> None:
        if not (len(fn.decorator_list) == 1 and _dotted(fn.decorator_list[0]) == "nki.jit"):
            self.fail(fn, "module-level functions must be decorated with exactly @nki.jit")
        a = fn.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults or a.kw_defaults:
            self.fail(fn, "kernel parameters must be plain positional names")
        for arg in a.args:
            if arg.annotation is not None:
                self.fail(arg, "no annotations on kernel parameters")
            self.name_ok(arg, arg.arg)
        if fn.returns is not None:
            self.fail(fn, "no return annotation")
        body = fn.body[1:] if fn.body and _is_docstring(fn.body[0]) else fn.body
        self.tensor_attrs = fn.name in self.user_kernels
        self.stmts(body)

    # ---- statements
    def stmts(self, body: list[ast.stmt]) -> None:
        for s in body:
            self.stmt(s)

    def stmt(self, s: ast.stmt) -> None:
        if isinstance(s, ast.Assign):
            for t in s.targets:
                self.target(t)
            self.expr(s.value)
        elif isinstance(s, ast.AugAssign):
            if not isinstance(s.op, INT_BINOPS):
                self.fail(s, "only int arithmetic (+ - * // %) is allowed")
            self.target(s.target)
            self.expr(s.value)
        elif isinstance(s, ast.For):
            if s.orelse:
                self.fail(s, "for/else is not allowed")
            self.target(s.target)
            it = s.iter
            if not (isinstance(it, ast.Call) and (
                    (_dotted(it.func) in {f"nl.{n}" for n in LOOP_ITERS}) or _dotted(it.func) == "range")):
                self.fail(it, "loops must iterate over nl.affine_range / nl.sequential_range / range")
            self.expr(it)
            self.stmts(s.body)
        elif isinstance(s, ast.Expr):
            if not isinstance(s.value, ast.Call):
                self.fail(s, "bare expressions must be calls")
            self.expr(s.value)
        elif isinstance(s, ast.Return):
            if s.value is not None:
                self.expr(s.value)
        elif isinstance(s, ast.Pass):
            pass
        else:
            self.fail(s, f"statement {type(s).__name__} is not allowed in a kernel")

    def target(self, t: ast.expr) -> None:
        if isinstance(t, ast.Name):
            self.name_ok(t, t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                self.target(e)
        else:
            self.fail(t, "assignment targets must be names")

    def name_ok(self, node: ast.AST, name: str) -> None:
        if name in FORBIDDEN_NAMES or name.startswith("__"):
            self.fail(node, f"name {name!r} is not allowed in a kernel")
        if name in MODULE_NAMES:
            self.fail(node, f"{name} may only be used as {name}.<name> (a documented NKI name), "
                      "not passed around or rebound")

    def attrs_ok(self, e: ast.expr) -> None:
        """``e`` is exactly a name of the NKI allowlist (``nl.add``, ``nl.tile_size.pmax``): an
        explicit list per module, so nothing behind ``nl`` (``nl.np``...) is reachable."""
        dotted = _dotted(e)
        if dotted is None or not nki_name_allowed(dotted):
            self.fail(e, f"{dotted or 'this attribute'} is not in the NKI namespace allowlist "
                      "(spec/namespace.py: documented nl / nisa names only)")

    # ---- expressions
    def expr(self, e: ast.expr) -> None:
        if isinstance(e, ast.Constant):
            if isinstance(e.value, str):
                self.fail(e, "string constants are not allowed (except float('inf'|'-inf'|'nan'))")
            if not (e.value is None or isinstance(e.value, (bool, int, float))):
                self.fail(e, "constant type not allowed")
        elif isinstance(e, ast.Name):
            self.name_ok(e, e.id)
        elif isinstance(e, ast.Attribute):
            if self.tensor_attrs and e.attr in TENSOR_ATTRS and isinstance(e.value, ast.Name):
                self.name_ok(e.value, e.value.id)
                return
            if _root(e) not in NKI_ROOTS:
                self.fail(e, "attribute access is only allowed on nl / nisa (and .ap calls)")
            self.attrs_ok(e)
        elif isinstance(e, ast.Call):
            self.call(e)
        elif isinstance(e, ast.BinOp):
            if not isinstance(e.op, INT_BINOPS):
                self.fail(e, "only int arithmetic (+ - * // %) is allowed")
            for side in (e.left, e.right):
                if isinstance(side, ast.Constant) and isinstance(side.value, float):
                    self.fail(e, "float arithmetic is not allowed in index expressions")
                self.expr(side)
        elif isinstance(e, ast.Compare):  # int comparisons, e.g. ``accumulate=k > 0``
            if len(e.ops) != 1 or not isinstance(e.ops[0], INT_CMPOPS):
                self.fail(e, "only single int comparisons (> >= < <= == !=) are allowed")
            self.expr(e.left)
            self.expr(e.comparators[0])
        elif isinstance(e, ast.UnaryOp):
            if not isinstance(e.op, (ast.USub, ast.UAdd)):
                self.fail(e, "only unary minus / plus are allowed")
            self.expr(e.operand)
        elif isinstance(e, ast.Subscript):
            if not isinstance(e.value, ast.Name):
                self.fail(e, "only named tiles can be sliced")
            self.expr(e.value)
            self.index(e.slice)
        elif isinstance(e, (ast.Tuple, ast.List)):
            for x in e.elts:
                self.expr(x)
        else:
            self.fail(e, f"expression {type(e).__name__} is not allowed in a kernel")

    def index(self, s: ast.expr) -> None:
        parts = s.elts if isinstance(s, ast.Tuple) else [s]
        for p in parts:
            if isinstance(p, ast.Slice):
                if p.step is not None:
                    self.fail(p, "strided tile slices are not allowed")
                for b in (p.lower, p.upper):
                    if b is not None:
                        self.expr(b)
            else:
                self.expr(p)

    def call(self, c: ast.Call) -> None:
        f = c.func
        if isinstance(f, ast.Name):
            if f.id == "float":
                if (len(c.args) == 1 and not c.keywords and isinstance(c.args[0], ast.Constant)
                        and c.args[0].value in FLOAT_LITERALS):
                    return
                self.fail(c, "float(...) is only allowed as float('inf'|'-inf'|'nan')")
            if f.id not in ALLOWED_BUILTINS:
                self.fail(c, f"call of {f.id!r} is not allowed (builtins: {sorted(ALLOWED_BUILTINS)})")
        elif isinstance(f, ast.Attribute):
            if f.attr == "ap" and isinstance(f.value, ast.Name):
                self.name_ok(f.value, f.value.id)
            elif f.attr == "ap" and _is_reshape(f.value):  # <tensor>.reshape((r, c)).ap(...)
                self.call(f.value)
            elif _is_reshape(c):
                self.name_ok(f.value, f.value.id)
            elif _root(f) not in NKI_ROOTS:
                self.fail(c, "only nl.*, nisa.*, <tensor>.ap(...) and <tensor>.reshape((r, c)) may be called")
            else:
                self.attrs_ok(f)
        else:
            self.fail(c, "only plain function calls are allowed")
        for a in c.args:
            if isinstance(a, ast.Starred):
                self.fail(a, "star arguments are not allowed")
            self.expr(a)
        for k in c.keywords:
            if k.arg is None:
                self.fail(c, "**kwargs are not allowed")
            self.expr(k.value)


def _is_target_record(node: ast.stmt) -> bool:
    """``PLATFORM_TARGET = "trn2"``: the one module-level assignment, naming a known target."""
    from ..target import KERNEL_TARGET_NAME, TARGETS

    return (isinstance(node, ast.Assign) and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name) and node.targets[0].id == KERNEL_TARGET_NAME
            and isinstance(node.value, ast.Constant) and node.value.value in TARGETS)


def _is_reshape(e: ast.expr) -> bool:
    """``<name>.reshape((int, int))``: the 2-D view an indirect DMA takes its row stride from."""
    return (isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "reshape"
            and isinstance(e.func.value, ast.Name) and len(e.args) == 1 and not e.keywords
            and isinstance(e.args[0], ast.Tuple)
            and all(isinstance(x, ast.Constant) and type(x.value) is int for x in e.args[0].elts))


def _is_docstring(s: ast.stmt) -> bool:
    return isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)


def _root(e: ast.expr) -> str | None:
    while isinstance(e, ast.Attribute):
        e = e.value
    return e.id if isinstance(e, ast.Name) else None


def _dotted(e: ast.expr) -> str | None:
    parts = []
    while isinstance(e, ast.Attribute):
        parts.append(e.attr)
        e = e.value
    if not isinstance(e, ast.Name):
        return None
    return ".".join([e.id] + parts[::-1])


def check_kernel_source(src: str, user_kernels: Iterable[str] = (), tree: ast.Module | None = None) -> None:
    """Raise :class:`KernelCheckError` unless ``src`` is a kernel module inside the NKI subset.

    ``user_kernels`` names the hand-written kernels in it: they may read ``x.shape`` / ``x.dtype``
    (generated kernels have every size baked in and may not). ``tree`` is ``src`` already parsed
    (parsing a big generated module is a good part of a compile; the conformance lint shares it)."""
    if tree is None:
        try:
            tree = ast.parse(src)
        except SyntaxError as e:
            raise KernelCheckError(f"kernel module does not parse: {e}") from e
    _Checker(src, frozenset(user_kernels)).module(tree)
