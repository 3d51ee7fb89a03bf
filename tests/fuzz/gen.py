"""A seeded generator of small PyTorch programs over the ops the compiler lowers.

A program is a list of inputs and a list of statements, each ``vN = <expression of earlier values>``
with a known shape and dtype, ending in a tuple of float outputs. It renders to Python source, so a
failing program *is* its own repro, and it can be shrunk statement by statement (``shrink``).

Shapes are ragged on purpose (sizes 1, 3, 77, 130, 300, 513: partial 128-row tiles, single rows,
odd free sizes); values stay finite (logs and divisions see ``abs() + 1``, exps a clamped input) so
eager and compiled results are comparable, gradients included.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace

import torch

SIZES = (1, 3, 77, 130, 300, 513)
SMALL = (1, 3, 7, 16)


@dataclass(frozen=True)
class Input:
    name: str
    shape: tuple[int, ...]
    kind: str = "randn"          # "randn" | "int" (randint(0, hi)) | "pos" (1 + 0.1 * randn)
    hi: int = 0

    def source(self) -> str:
        shp = ", ".join(map(str, self.shape)) if self.shape else "()"
        if self.kind == "int":
            return f"torch.randint(0, {self.hi}, ({shp}{',' if len(self.shape) == 1 else ''}))"
        if self.kind == "pos":
            return f"1 + 0.1 * torch.randn({shp})"
        return f"torch.randn({shp})"


@dataclass(frozen=True)
class Stmt:
    name: str
    code: str                    # the expression, ``{0}``, ``{1}``... for ``args``
    args: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: str = "float32"       # float32 | bfloat16 | bool | int64
    noisy: bool = False          # rounds to bf16 inside the program: compare with bf16 tolerances

    def source(self) -> str:
        return f"{self.name} = {self.code.format(*self.args)}"


@dataclass
class Program:
    inputs: list[Input]
    stmts: list[Stmt]
    outputs: list[str]
    seed: int = 0

    @property
    def noisy(self) -> bool:
        return any(s.noisy for s in self.stmts)

    def source(self) -> str:
        lines = ["import torch", "import torch.nn.functional as F", "",
                 f"def prog({', '.join(i.name for i in self.inputs)}):"]
        lines += [f"    {s.source()}" for s in self.stmts]
        lines.append(f"    return ({', '.join(self.outputs)},)")
        lines += ["", f"torch.manual_seed({self.seed})",
                  f"args = [{', '.join(i.source() for i in self.inputs)}]"]
        return "\n".join(lines) + "\n"

    def build(self):
        """(function, inputs) — the inputs drawn from ``torch.manual_seed(seed)`` as in the source."""
        ns: dict = {}
        exec(compile(self.source(), f"<fuzz program {self.seed}>", "exec"), ns)
        return ns["prog"], ns["args"]


# ----------------------------------------------------------------------------------- generation

@dataclass
class _Val:
    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"


@dataclass
class _Gen:
    rng: random.Random
    max_numel: int
    inputs: list[Input] = field(default_factory=list)
    stmts: list[Stmt] = field(default_factory=list)
    vals: list[_Val] = field(default_factory=list)

    # --- helpers ------------------------------------------------------------------------------
    def numel_ok(self, shape) -> bool:
        return 0 < math.prod(shape) <= self.max_numel

    def new_input(self, shape, kind: str = "randn", hi: int = 0) -> str:
        prefix = "i" if kind == "int" else ("w" if kind == "pos" else "x")
        name = f"{prefix}{sum(1 for i in self.inputs if i.name[0] == prefix)}"
        self.inputs.append(Input(name, tuple(shape), kind, hi))
        if kind != "int":
            self.vals.append(_Val(name, tuple(shape)))
        return name

    def emit(self, code: str, args, shape, dtype: str = "float32", noisy: bool = False) -> _Val:
        name = f"v{len(self.stmts)}"
        self.stmts.append(Stmt(name, code, tuple(args), tuple(shape), dtype, noisy))
        v = _Val(name, tuple(shape), dtype)
        if dtype == "float32":
            self.vals.append(v)
        return v

    def rand_shape(self, rank: int | None = None) -> tuple[int, ...]:
        for _ in range(50):
            r = rank or self.rng.choice((1, 2, 2, 3, 3, 4))
            shape = tuple(self.rng.choice(SIZES if r <= 2 or k >= r - 2 else SMALL) for k in range(r))
            if self.numel_ok(shape) and math.prod(shape) > 1:
                return shape
        return (3, 77)

    def pick(self, pred=lambda v: True) -> _Val | None:
        cands = [v for v in self.vals if pred(v)]
        if not cands:
            return None
        # prefer recent values: programs become chains, not piles of independent ops
        k = min(len(cands), 4)
        return self.rng.choice(cands[-k:])

    def bshape(self, shape) -> tuple[int, ...]:
        """A shape that broadcasts against ``shape``: a suffix, some dims set to 1, or the same."""
        mode = self.rng.random()
        if mode < 0.4:
            return tuple(shape)
        if mode < 0.7 and len(shape) > 1:
            return tuple(shape[self.rng.randrange(1, len(shape)):])
        return tuple(1 if self.rng.random() < 0.5 else s for s in shape)

    # --- ops ----------------------------------------------------------------------------------
    UNARY = [
        "torch.exp({0}.clamp(-6.0, 6.0))", "torch.log({0}.abs() + 1)", "torch.rsqrt({0}.abs() + 1)",
        "torch.sqrt({0}.abs() + 0.01)", "({0}.abs() + 1).pow(-1.5)", "{0}.pow(2)", "torch.sigmoid({0})",
        "torch.tanh({0})", "F.silu({0})", "F.gelu({0})", "torch.relu({0})", "-{0}", "{0}.abs()",
        "{0} * 0.5 + 0.25", "torch.sin({0})", "torch.cos({0})", "F.softplus({0})",
        "{0}.clamp(-0.5, 1.0)", "{0}.masked_fill({0} > 1.0, 0.0)",
    ]
    BINARY = ["{0} + {1}", "{0} - {1}", "{0} * {1}", "{0} / ({1}.abs() + 1)", "torch.maximum({0}, {1})",
              "torch.minimum({0}, {1})", "torch.add({0}, {1}, alpha=0.5)"]
    CMP = [">", "<", ">=", "<="]

    def op_unary(self) -> bool:
        v = self.pick()
        return v is not None and bool(self.emit(self.rng.choice(self.UNARY), [v.name], v.shape))

    def _other(self, shape) -> str:
        """A second operand for ``shape``: an earlier value of a broadcastable shape or a new input."""
        for v in reversed(self.vals[-6:]):
            if v.shape == tuple(shape) or (len(v.shape) <= len(shape) and
                                           v.shape == tuple(shape[len(shape) - len(v.shape):])):
                if self.rng.random() < 0.5:
                    return v.name
        return self.new_input(self.bshape(shape))

    def op_binary(self) -> bool:
        v = self.pick()
        if v is None:
            return False
        o = self._other(v.shape)
        code = self.rng.choice(self.BINARY)
        if self.rng.random() < 0.5:
            self.emit(code, [v.name, o], v.shape)
        else:
            self.emit(code, [o, v.name] if "abs" not in code else [v.name, o], v.shape)
        return True

    def op_scalar(self) -> bool:
        v = self.pick()
        if v is None:
            return False
        c = self.rng.choice(["0.1", "-2.0", "3", "0.25"])
        self.emit(self.rng.choice(["{0} * " + c, "{0} + " + c, c + " - {0}"]), [v.name], v.shape)
        return True

    def op_where(self) -> bool:
        v = self.pick()
        if v is None:
            return False
        cmp = self.rng.choice(self.CMP)
        rhs = self.rng.choice(["0.0", "0.5", None])
        rhs = rhs if rhs is not None else self._other(v.shape)
        other = self.rng.choice(["0.0", "-1.0", None])
        if other is None:
            other = self._other(v.shape)
        args = [v.name, rhs, other]
        self.emit("torch.where({0} %s {1}, {0}, {2})" % cmp, args, v.shape)
        return True

    def op_cast(self) -> bool:
        v = self.pick()
        if v is None:
            return False
        leaf = any(i.name == v.name for i in self.inputs)
        if self.rng.random() < 0.5:
            self.emit("{0}.to(torch.bfloat16).float()", [v.name], v.shape, noisy=not leaf)
        else:  # compute one op in bf16 (softmax / silu / mul), back to fp32
            code = self.rng.choice(["F.silu({0}.to(torch.bfloat16)).float()",
                                    "({0}.to(torch.bfloat16) * 2).float()",
                                    "torch.tanh({0}.to(torch.bfloat16)).float()"])
            self.emit(code, [v.name], v.shape, noisy=True)
        return True

    def op_reduce(self) -> bool:
        v = self.pick(lambda v: len(v.shape) >= 1)
        if v is None:
            return False
        d = self.rng.randrange(len(v.shape))
        dn = self.rng.choice([d, d - len(v.shape)])
        kind = self.rng.choice(["sum", "mean", "amax", "softmax", "log_softmax", "var", "var", "multi"])
        if kind == "multi":  # several axes (or all of them) at once
            if len(v.shape) < 2:
                return False
            axes = sorted(self.rng.sample(range(len(v.shape)), self.rng.randint(2, len(v.shape))))
            keep = self.rng.random() < 0.5
            shape = tuple(1 if k in axes else s for k, s in enumerate(v.shape)) if keep else \
                tuple(s for k, s in enumerate(v.shape) if k not in axes) or ()
            if not shape:
                self.emit("{0}.sum() * 0.01", [v.name], ())
                return True
            red = self.rng.choice(["sum", "mean"])
            self.emit(f"{{0}}.{red}({axes}{', keepdim=True' if keep else ''})", [v.name], shape)
            return True
        keep = self.rng.random() < 0.5
        if kind in ("softmax", "log_softmax"):
            self.emit(f"{{0}}.{kind}({dn})", [v.name], v.shape)
            return True
        shape = tuple(1 if k == d else s for k, s in enumerate(v.shape)) if keep else \
            tuple(s for k, s in enumerate(v.shape) if k != d)
        if not shape:
            keep, shape = True, (1,) * len(v.shape)
        extra = ", keepdim=True" if keep else ""
        if kind == "var":
            if v.shape[d] < 2:
                return False
            corr = self.rng.choice([0, 1])
            self.emit(f"torch.var({{0}}, dim={dn}, correction={corr}{extra})", [v.name], shape)
        elif kind == "amax":
            self.emit(f"{{0}}.amax({dn}{extra})", [v.name], shape)
        else:
            self.emit(f"{{0}}.{kind}({dn}{extra})", [v.name], shape)
        return True

    def op_matmul(self) -> bool:
        v = self.pick(lambda v: 1 <= len(v.shape) <= 3)
        if v is None:
            return False
        k = v.shape[-1]
        n = self.rng.choice(SIZES)
        shape = v.shape[:-1] + (n,)
        if not self.numel_ok(shape) or k * n > self.max_numel:
            return False
        r = self.rng.random()
        if r < 0.4:
            w = self.new_input((k, n))
            self.emit("{0} @ {1}", [v.name, w], shape)
        elif r < 0.8:
            w = self.new_input((n, k))
            if self.rng.random() < 0.5:
                b = self.new_input((n,))
                self.emit("F.linear({0}, {1}, {2})", [v.name, w, b], shape)
            else:
                self.emit("F.linear({0}, {1})", [v.name, w], shape)
        else:  # scores of a value against itself
            if len(v.shape) < 2:
                return False
            shape = v.shape[:-1] + (v.shape[-2],)
            if not self.numel_ok(shape):
                return False
            self.emit("({0} @ {0}.transpose(-1, -2)) * 0.1", [v.name], shape)
        return True

    def op_view(self) -> bool:
        v = self.pick(lambda v: len(v.shape) >= 1)
        if v is None:
            return False
        r = len(v.shape)
        kind = self.rng.choice(["slice", "slice", "transpose", "expand", "unsqueeze", "reshape", "permute"])
        if kind == "permute":
            if r < 3:
                return False
            perm = list(range(r))
            self.rng.shuffle(perm)
            self.emit(f"{{0}}.permute({', '.join(map(str, perm))})", [v.name], tuple(v.shape[k] for k in perm))
            return True
        if kind == "slice":
            d = self.rng.randrange(r)
            n = v.shape[d]
            if n < 2:
                return False
            start = self.rng.randrange(0, max(1, n // 2))
            stop = self.rng.randrange(start + 1, n + 1)
            step = self.rng.choice([1, 2, 3])
            length = len(range(start, stop, step))
            idx = ", ".join([":"] * d + [f"{start}:{stop}:{step}" if step > 1 else f"{start}:{stop}"])
            shape = tuple(length if k == d else s for k, s in enumerate(v.shape))
            self.emit(f"{{0}}[{idx}]", [v.name], shape)
        elif kind == "transpose":
            if r < 2:
                return False
            a, b = self.rng.sample(range(r), 2)
            shape = list(v.shape)
            shape[a], shape[b] = shape[b], shape[a]
            self.emit(f"{{0}}.transpose({a}, {b})", [v.name], shape)
        elif kind == "expand":
            n = self.rng.choice((3, 4, 7))
            d = self.rng.randrange(r + 1)
            shape = v.shape[:d] + (n,) + v.shape[d:]
            if not self.numel_ok(shape):
                return False
            self.emit(f"{{0}}.unsqueeze({d}).expand({', '.join(map(str, shape))})", [v.name], shape)
        elif kind == "unsqueeze":
            d = self.rng.randrange(r + 1)
            self.emit(f"{{0}}.unsqueeze({d})", [v.name], v.shape[:d] + (1,) + v.shape[d:])
        else:
            if r >= 2 and self.rng.random() < 0.5:
                d = self.rng.randrange(r - 1)
                shape = v.shape[:d] + (v.shape[d] * v.shape[d + 1],) + v.shape[d + 2:]
            else:
                d = self.rng.randrange(r)
                n = v.shape[d]
                divs = [q for q in range(2, n) if n % q == 0]
                if not divs:
                    return False
                q = self.rng.choice(divs)
                shape = v.shape[:d] + (q, n // q) + v.shape[d + 1:]
            self.emit(f"{{0}}.reshape({', '.join(map(str, shape))})", [v.name], shape)
        return True

    def op_index(self) -> bool:
        v = self.pick(lambda v: len(v.shape) >= 1)
        if v is None:
            return False
        r = len(v.shape)
        d = self.rng.randrange(r)
        n = v.shape[d]
        if self.rng.random() < 0.5:
            k = self.rng.choice((1, 3, 5, 77))
            i = self.new_input((k,), "int", n)
            shape = tuple(k if j == d else s for j, s in enumerate(v.shape))
            if not self.numel_ok(shape):
                return False
            self.emit(f"torch.index_select({{0}}, {d}, {{1}})", [v.name, i], shape)
        else:  # gather: an index no bigger than v on any dim
            shape = tuple(self.rng.choice((1, 3, 5, s)) if j == d else
                          self.rng.choice((s, s, 1, max(1, s // 2))) for j, s in enumerate(v.shape))
            i = self.new_input(shape, "int", n)
            self.emit(f"torch.gather({{0}}, {d - r if self.rng.random() < 0.5 else d}, {{1}})",
                      [v.name, i], shape)
        return True

    def op_embedding(self) -> bool:
        rows, dim = self.rng.choice(SIZES[1:]), self.rng.choice(SIZES[1:4])
        k = self.rng.choice((1, 3, 77, 130))
        if not self.numel_ok((k, dim)):
            return False
        w = self.new_input((rows, dim))
        i = self.new_input((k,), "int", rows)
        self.emit("F.embedding({1}, {0})", [w, i], (k, dim))
        return True

    def op_sdpa(self) -> bool:
        v = self.pick(lambda v: len(v.shape) in (3, 4) and v.shape[-1] <= 130 and v.shape[-2] <= 300)
        if v is None:
            return False
        if len(v.shape) == 3:
            v = self.emit("{0}.unsqueeze(1)", [v.name], (v.shape[0], 1) + v.shape[1:])
        causal = self.rng.random() < 0.5
        if self.rng.random() < 0.5:
            self.emit(f"F.scaled_dot_product_attention({{0}}, {{0}}, {{0}}, is_causal={causal})",
                      [v.name], v.shape)
        else:
            kv = self.new_input(v.shape)
            self.emit(f"F.scaled_dot_product_attention({{0}}, {{1}}, {{1}}, is_causal={causal})",
                      [v.name, kv], v.shape)
        return True

    OPS = [("op_unary", 4), ("op_binary", 4), ("op_scalar", 1), ("op_where", 2), ("op_cast", 1),
           ("op_reduce", 4), ("op_matmul", 2), ("op_view", 4), ("op_index", 2), ("op_embedding", 1),
           ("op_sdpa", 1)]


def generate(seed: int, max_ops: int = 6, max_numel: int = 1 << 16) -> Program:
    """The program of ``seed``: 1..``max_ops`` statements over fresh ragged inputs."""
    rng = random.Random(seed)
    g = _Gen(rng, max_numel)
    g.new_input(g.rand_shape())
    names = [n for n, _ in _Gen.OPS]
    weights = [w for _, w in _Gen.OPS]
    target = rng.randint(1, max_ops)
    tries = 0
    while len(g.stmts) < target and tries < 20 * max_ops:
        tries += 1
        getattr(g, rng.choices(names, weights)[0])()
    if not g.stmts:
        g.emit("{0} * 2", [g.vals[0].name], g.vals[0].shape)
    # outputs: the values nothing reads (every statement matters), the last one first, at most 3
    used = {a for s in g.stmts for a in s.args}
    floats = [s.name for s in g.stmts if s.dtype == "float32"]
    outs = [floats[-1]] + [n for n in reversed(floats[:-1]) if n not in used][:2]
    return Program(g.inputs, g.stmts, outs, seed)


# ----------------------------------------------------------------------------------- shrinking

def _prune(p: Program) -> Program:
    """Drop statements no output needs and inputs nothing reads."""
    need = set(p.outputs)
    keep = []
    for s in reversed(p.stmts):
        if s.name in need:
            keep.append(s)
            need |= set(s.args)
    keep.reverse()
    return replace(p, stmts=keep, inputs=[i for i in p.inputs if i.name in need])


def _bypass(p: Program, k: int, arg: str) -> Program:
    """Statement ``k`` replaced by its argument ``arg`` (same shape and dtype) in every reader."""
    s = p.stmts[k]
    stmts = [replace(t, args=tuple(arg if a == s.name else a for a in t.args)) for t in p.stmts]
    outs = [arg if o == s.name else o for o in p.outputs]
    return _prune(replace(p, stmts=stmts[:k] + stmts[k + 1:], outputs=outs))


def shrink(p: Program, fails) -> Program:
    """A smaller program for which ``fails(program)`` still holds (greedy: single outputs first,
    then statements bypassed one at a time)."""
    p = _prune(p)
    if len(p.outputs) > 1:
        for o in p.outputs:
            q = _prune(replace(p, outputs=[o]))
            if fails(q):
                p = q
                break
    changed = True
    while changed:
        changed = False
        shapes = {i.name: (i.shape, "int" if i.kind == "int" else "float32") for i in p.inputs}
        shapes.update({s.name: (s.shape, s.dtype) for s in p.stmts})
        for k in range(len(p.stmts) - 1, -1, -1):
            s = p.stmts[k]
            for a in dict.fromkeys(s.args):
                if shapes.get(a) == (s.shape, s.dtype) and a in shapes:
                    q = _bypass(p, k, a)
                    if q.stmts and fails(q):
                        p, changed = q, True
                        break
            if changed:
                break
    return p
