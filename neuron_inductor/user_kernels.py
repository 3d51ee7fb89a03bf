"""Hand-written NKI kernels registered as the implementation of ``torch.library`` custom ops.

A user kernel is an ``@nki.jit`` function in the current NKI API (dest-first ``nisa`` calls, as our
generated kernels are). Registering it for a custom op makes the compiler emit a call of that kernel
wherever the op appears in a compiled graph, exactly like one of its own kernels: the kernel's source
is copied into the graph's kernels module (so it is cached, statically checked and run by the same
runtime), and the host wrapper passes it the op's tensors.

This module is a leaf (standard library only) because the cache key reads it on every lookup: a
kernel's source digest is part of the key of every graph that calls it, so editing the kernel
recompiles those graphs instead of reusing stale entries.

What a kernel receives and returns:

* each tensor argument of the op as a dense HBM tensor of the op's shape (the compiler copies a
  non-contiguous input first), each non-tensor argument as the Python value;
* it returns one ``nl.shared_hbm`` array per tensor output of the op, of the shape and dtype the op's
  fake implementation gives (checked when the kernel returns).

Its body may use ``nl``, ``nisa``, its parameters, ``<param>.shape`` / ``<param>.dtype`` and int /
float / bool constants of its module (those are copied into the kernel as local assignments).
"""
from __future__ import annotations

import ast
import builtins
import hashlib
import inspect
import re
import textwrap
import threading
from dataclasses import dataclass
from typing import Any, Callable

#: names a kernel body may use without defining them
KERNEL_NAMES = frozenset({"nl", "nisa", "nki"})
_BUILTINS = frozenset({"min", "max", "range", "len", "float", "int", "bool", "True", "False", "None"})


class UserKernelError(ValueError):
    """A kernel that cannot be registered: the message says what to change."""


@dataclass(frozen=True)
class UserKernel:
    """One registered kernel: the op it implements and the source the compiler emits for it."""

    op_name: str          # "namespace::name" of the custom op
    kernel_name: str      # the function's own name
    source: str           # the ``@nki.jit`` function as emitted (renamed to ``emitted_name``)
    emitted_name: str     # name inside generated kernel modules
    params: tuple[str, ...]
    digest: str           # sha256 of ``source``: part of the cache key of graphs that call it


_lock = threading.Lock()
_by_op: dict[str, UserKernel] = {}


def python_function(kernel: Any) -> Callable:
    """The plain Python function behind an ``@nki.jit`` object (simulator or real toolchain)."""
    fn = kernel
    for attr in ("fn", "func", "__wrapped__"):
        inner = getattr(fn, attr, None)
        if inner is not None and inspect.isfunction(inner):
            fn = inner
            break
    if not inspect.isfunction(fn):
        raise UserKernelError(f"{kernel!r} is not a Python function or an @nki.jit kernel")
    return fn


def _free_names(fn_node: ast.FunctionDef) -> list[str]:
    """Names the body reads but never binds (parameters, assignments and loop targets bind)."""
    bound = {a.arg for a in fn_node.args.args}
    read: list[str] = []
    for node in ast.walk(fn_node):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store):
                bound.add(node.id)
            elif node.id not in read:
                read.append(node.id)
    return [n for n in read if n not in bound and n not in KERNEL_NAMES and n not in _BUILTINS]


def _constants(fn: Callable, names: list[str]) -> dict[str, Any]:
    """Values of the free names: int / float / bool constants only (copied into the kernel)."""
    closure = {}
    if fn.__closure__:
        closure = {n: c.cell_contents for n, c in zip(fn.__code__.co_freevars, fn.__closure__)}
    out = {}
    for n in names:
        if n in closure:
            v = closure[n]
        elif n in fn.__globals__:
            v = fn.__globals__[n]
        elif hasattr(builtins, n):
            raise UserKernelError(f"kernel {fn.__name__} calls {n!r}: inside a kernel only nl.*, "
                                  "nisa.* and min / max / range / len may be called")
        else:
            raise UserKernelError(f"kernel {fn.__name__} reads {n!r}, which is not defined")
        if isinstance(v, bool) or (isinstance(v, (int, float)) and not isinstance(v, complex)):
            out[n] = v
        else:
            raise UserKernelError(
                f"kernel {fn.__name__} reads module-level {n!r} ({type(v).__name__}); a kernel may "
                "only use nl, nisa, its parameters and int / float / bool constants (pass anything "
                "else as an argument of the op)")
    return out


def kernel_source(kernel: Any, emitted_name: str) -> tuple[str, tuple[str, ...], str]:
    """(source as emitted, parameter names, original name) of ``kernel``.

    The decorators are replaced by exactly ``@nki.jit`` (options such as ``mode=`` belong to the
    runtime, not to the kernel), the function is renamed to ``emitted_name`` and the constants it
    reads from its module are assigned at the top of its body, so the text stands alone in a
    generated module. Comments and layout are kept as the user wrote them.
    """
    fn = python_function(kernel)
    try:
        src = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
        raise UserKernelError(f"cannot read the source of kernel {fn.__name__}: {e}") from e
    tree = ast.parse(src)
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef):
        raise UserKernelError(f"kernel {fn.__name__} must be a plain (not async) function")
    lines = src.splitlines()
    body_lines = lines[node.lineno - 1:]  # from the ``def`` line: decorators dropped
    head, n = re.subn(rf"^def\s+{re.escape(node.name)}\s*\(", f"def {emitted_name}(", body_lines[0])
    if n != 1:
        raise UserKernelError(f"kernel {fn.__name__}: the `def` line must be on one line")
    body_lines[0] = head
    consts = _constants(fn, _free_names(node))
    if consts:
        first = node.body[0]
        has_doc = isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant) \
            and isinstance(first.value.value, str)
        anchor = node.body[1] if has_doc and len(node.body) > 1 else first
        at = anchor.lineno - node.lineno  # index in body_lines
        if has_doc and len(node.body) == 1:
            at = first.end_lineno - node.lineno + 1
        pad = " " * anchor.col_offset
        body_lines[at:at] = [f"{pad}{k} = {v!r}" for k, v in consts.items()]
    text = "@nki.jit\n" + "\n".join(body_lines).rstrip() + "\n"
    params = tuple(a.arg for a in node.args.args)
    return text, params, node.name


def register(op_name: str, kernel: Any) -> UserKernel:
    """Record ``kernel`` as the implementation of custom op ``op_name`` (replacing an earlier one)."""
    fn = python_function(kernel)
    emitted = "user_" + re.sub(r"\W", "_", op_name.replace("::", "_")) + "_" + fn.__name__
    source, params, name = kernel_source(kernel, emitted)
    uk = UserKernel(op_name, name, source, emitted, params, hashlib.sha256(source.encode()).hexdigest())
    with _lock:
        _by_op[op_name] = uk
    return uk


def unregister(op_name: str) -> None:
    with _lock:
        _by_op.pop(op_name, None)


def lookup(target: Any) -> UserKernel | None:
    """The kernel registered for an FX node target (an ``OpOverload``), if any."""
    if not _by_op:
        return None
    name = getattr(getattr(target, "_schema", None), "name", None)
    return _by_op.get(name) if name else None


def registered() -> dict[str, UserKernel]:
    with _lock:
        return dict(_by_op)


def digests_in(gm: Any) -> dict[str, str]:
    """``{op name: kernel digest}`` for the user kernels ``gm`` calls (empty for most graphs)."""
    if not _by_op:
        return {}
    out = {}
    for n in gm.graph.nodes:
        if n.op == "call_function":
            uk = lookup(n.target)
            if uk is not None:
                out[uk.op_name] = uk.digest
    return dict(sorted(out.items()))
