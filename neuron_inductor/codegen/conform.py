"""Static conformance check of emitted kernel source against the instruction specification.

Runs on every compile next to the AST allowlist (check.py), and over debug dumps
(``neuron-inductor lint DIR``). It reads the module the way a reviewer would: the target from
``PLATFORM_TARGET``, each buffer's memory and dtype from its ``nl.ndarray`` declaration (HBM
parameters from the kernel docstring), and for every ``nisa`` call the engine, operators, literal
operands and operand buffers; then asks :func:`neuron_inductor.spec.check_instr` (the rules the
simulator and the IR verifier apply). Sizes are used where they are literal ints; anything
computed is unknown and never produces a finding. It also flags, in source order, a
``nc_matmul(accumulate=True)`` into a PSUM buffer that a non-matmul instruction wrote or that no
matmul has initialised yet.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from .. import spec
from ..target import KERNEL_TARGET_NAME, TARGETS
from .check import KernelCheckError

#: ``in0: float32[4096] (input)`` in the kernel docstring; a shaped base reads ``float32[32, 128]``
_PARAM_LINE = re.compile(r"^\s+(\w+): (\w+)\[(\d+(?:, *\d+)*)\] \((\w+)\)\s*$")
_UNKNOWN = object()


@dataclass(frozen=True)
class LintFinding:
    kernel: str
    line: int
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kernel}:{self.line}: [{self.rule}] {self.detail}"


class KernelConformanceError(KernelCheckError):
    """The emitted kernels break documented NKI rules; ``findings`` lists every violation."""

    def __init__(self, findings: list[LintFinding]) -> None:
        self.findings = findings
        rules = sorted({f.rule for f in findings})
        head = "\n".join(f"  {f}" for f in findings[:10])
        more = f"\n  ... {len(findings) - 10} more" if len(findings) > 10 else ""
        super().__init__(f"{len(findings)} NKI conformance finding(s) ({', '.join(rules)}):\n{head}{more}")


@dataclass
class _Buf:
    memory: str
    dtype: str | None
    shape: tuple[int | None, ...] | None = None


def _const(e: ast.expr) -> Any:
    """The Python value of a literal expression, else ``_UNKNOWN``."""
    if isinstance(e, ast.Constant) and isinstance(e.value, (int, float, bool)):
        return e.value
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.USub, ast.UAdd)):
        v = _const(e.operand)
        return _UNKNOWN if v is _UNKNOWN else (-v if isinstance(e.op, ast.USub) else v)
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "float" and e.args \
            and isinstance(e.args[0], ast.Constant):
        return float(e.args[0].value)
    if isinstance(e, (ast.List, ast.Tuple)):
        vals = [_const(x) for x in e.elts]
        return [None if v is _UNKNOWN else v for v in vals]
    return _UNKNOWN


def _dotted(e: ast.expr) -> str | None:
    parts = []
    while isinstance(e, ast.Attribute):
        parts.append(e.attr)
        e = e.value
    return ".".join([e.id] + parts[::-1]) if isinstance(e, ast.Name) else None


class _KernelLint:
    def __init__(self, fn: ast.FunctionDef, target: str) -> None:
        self.fn = fn
        self.target = target
        self.bufs: dict[str, _Buf] = {}
        self.findings: list[LintFinding] = []
        self.mm_init: set[str] = set()      # PSUM buffers some matmul has written
        self.other_init: set[str] = set()   # PSUM buffers a non-matmul instruction has written
        doc = ast.get_docstring(fn) or ""
        for line in doc.splitlines():
            m = _PARAM_LINE.match(line)
            if m:
                self.bufs[m.group(1)] = _Buf("hbm", m.group(2), tuple(int(x) for x in m.group(3).split(",")))

    def add(self, node: ast.AST, rule: str, detail: str) -> None:
        self.findings.append(LintFinding(self.fn.name, getattr(node, "lineno", 0), rule, detail))

    def run(self) -> list[LintFinding]:
        self.block(self.fn.body)
        return self.findings

    def block(self, body: list[ast.stmt]) -> None:
        for s in body:
            if isinstance(s, ast.For):
                self.block(s.body)
            elif isinstance(s, ast.Assign) and isinstance(s.value, ast.Call):
                self.declare(s)
            elif isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
                self.call(s.value)

    def declare(self, s: ast.Assign) -> None:
        c = s.value
        if _dotted(c.func) != "nl.ndarray" or len(s.targets) != 1 or not isinstance(s.targets[0], ast.Name):
            return
        kw = {k.arg: k.value for k in c.keywords}
        dtype = _dotted(kw["dtype"]) if "dtype" in kw else None
        dtype = dtype.split(".", 1)[1] if dtype and dtype.startswith("nl.") else None
        buf = _dotted(kw["buffer"]) if "buffer" in kw else None
        memory = {"nl.sbuf": "sbuf", "nl.psum": "psum", "nl.shared_hbm": "hbm", "nl.hbm": "hbm"}.get(buf or "", "sbuf")
        shape = _const(c.args[0]) if c.args else _UNKNOWN
        self.bufs[s.targets[0].id] = _Buf(memory, dtype, tuple(shape) if isinstance(shape, list) else None)
        if dtype is not None and dtype not in spec.DTYPES:
            self.add(s, "dtype-known", f"{s.targets[0].id} is declared {dtype}, not an NKI dtype")

    # ---- operands
    def operand(self, e: ast.expr) -> Any:
        if isinstance(e, ast.Name) and e.id in self.bufs:
            b = self.bufs[e.id]
            return self._opnd(b, b.shape)
        if isinstance(e, ast.Subscript) and isinstance(e.value, ast.Name) and e.value.id in self.bufs:
            b = self.bufs[e.value.id]
            parts = e.slice.elts if isinstance(e.slice, ast.Tuple) else [e.slice]
            sizes: list[int | None] = []
            for p in parts:
                if isinstance(p, ast.Slice):
                    lo = _const(p.lower) if p.lower is not None else 0
                    hi = _const(p.upper) if p.upper is not None else _UNKNOWN
                    sizes.append(hi - lo if isinstance(lo, int) and isinstance(hi, int) else None)
                else:
                    sizes.append(1)
            return self._opnd(b, tuple(sizes))
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "ap" \
                and isinstance(e.func.value, ast.Name):
            b = self.bufs.get(e.func.value.id, _Buf("hbm", None))
            kw = {k.arg: k.value for k in e.keywords}
            pat = _const(kw["pattern"]) if "pattern" in kw else (_const(e.args[0]) if e.args else _UNKNOWN)
            sizes = tuple(p[1] if isinstance(p, list) and len(p) == 2 else None for p in pat) \
                if isinstance(pat, list) else None
            if "vector_offset" in kw:
                offs = self.operand(kw["vector_offset"])
                dim = _const(kw["indirect_dim"]) if "indirect_dim" in kw else 0
                for f in spec.check_indirect(b.shape if b.memory == "hbm" else None, b.memory,
                                             pat if isinstance(pat, list) else [], dim if isinstance(dim, int) else 0,
                                             offs if isinstance(offs, spec.Opnd) else None):
                    self.add(e, f.rule, f"{e.func.value.id}.ap: {f.detail}")
            return self._opnd(_Buf("hbm", b.dtype), sizes)
        dotted = _dotted(e)
        if dotted and dotted.startswith("nl."):
            return dotted[3:]
        return _const(e)

    @staticmethod
    def _opnd(b: _Buf, shape: tuple | None) -> spec.Opnd:
        parts = free = None
        if shape:
            parts = shape[0] if isinstance(shape[0], int) else None
            free = 1
            for z in shape[1:]:
                free = free * z if free is not None and isinstance(z, int) else None
            if len(shape) == 1:
                free = None
        return spec.Opnd(b.memory, b.dtype, parts, free)

    # ---- instructions
    def call(self, c: ast.Call) -> None:
        name = _dotted(c.func) or ""
        if not name.startswith("nisa."):
            return
        op = name[5:]
        kw = {k.arg: k.value for k in c.keywords if k.arg}
        engine = None
        if "engine" in kw:
            d = _dotted(kw.pop("engine")) or ""
            engine = d.rsplit(".", 1)[-1].replace("_engine", "")
        spec_i = spec.instr_spec(op)
        tile_roles = set(spec_i.tiles) | {"dst"} if spec_i else {"dst"}
        ops: dict[str, Any] = {}
        attrs: dict[str, Any] = {}
        for k, v in kw.items():
            val = self.operand(v)
            if val is _UNKNOWN:
                continue
            (ops if k in tile_roles or isinstance(val, spec.Opnd) else attrs)[k] = val
        for f in spec.check_instr(op, engine, self.target, ops, attrs):
            self.add(c, f.rule, f.detail)
        self.accumulation(c, op, kw)

    def accumulation(self, c: ast.Call, op: str, kw: dict[str, ast.expr]) -> None:
        dst = kw.get("dst")
        base = dst.value if isinstance(dst, ast.Subscript) else dst
        if not isinstance(base, ast.Name) or self.bufs.get(base.id, _Buf("", None)).memory != "psum":
            return
        if op != "nc_matmul":
            self.other_init.add(base.id)
            return
        acc = _const(kw["accumulate"]) if "accumulate" in kw else None
        if acc is not True:  # overwrites (on its first iteration, for accumulate=k > 0)
            self.other_init.discard(base.id)
        if acc is True:
            if base.id in self.other_init:  # allowed from NeuronCore-v4
                if spec.accumulate_onto_nonmatmul_refused(self.target):
                    self.add(c, "matmul-accumulate-nonmatmul", f"nc_matmul(accumulate=True) into "
                             f"{base.id}, which a non-matmul instruction initialised")
            elif base.id not in self.mm_init:
                self.add(c, "matmul-first-overwrite", f"nc_matmul(accumulate=True) into {base.id} before "
                         "any matmul initialised it")
        self.mm_init.add(base.id)


def module_target(tree: ast.Module) -> str | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id == KERNEL_TARGET_NAME and isinstance(node.value, ast.Constant):
            return node.value.value
    return None


def conformance_findings(src: str, target: str | None = None, tree: ast.Module | None = None) -> list[LintFinding]:
    """Every rule violation in a kernel module (empty list: conforming); ``tree``: ``src`` parsed."""
    tree = ast.parse(src) if tree is None else tree
    t = target or module_target(tree)
    if t is None:
        from ..config import get_config
        t = get_config().target
    if t not in TARGETS:
        return [LintFinding("<module>", 0, "engine-allowed", f"unknown target {t!r}")]
    out: list[LintFinding] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out += _KernelLint(node, t).run()
    return out


def check_conformance(src: str, tree: ast.Module | None = None) -> None:
    """Raise :class:`KernelConformanceError` unless every kernel of ``src`` conforms."""
    findings = conformance_findings(src, tree=tree)
    if findings:
        raise KernelConformanceError(findings)
