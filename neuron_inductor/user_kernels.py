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

Kernels registered the TorchNeuron way need no call here: an op declared with
``torch_neuronx.nki_op`` (Neuron docs, "How to work with NKI kernels from torch-neuronx": a
``torch.library`` custom op whose body launches an ``@nki.jit`` kernel) is found by :func:`lookup`
when its body is the launch itself, ``return kernel(<the op's parameters, in order>)`` (optionally
``kernel[grid](...)``); its autograd is whatever the user registered for the op.
"""
from __future__ import annotations

import ast
import builtins
import hashlib
import inspect
import re
import sys
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
        body_lines[at:at] = [f"{pad}{k} = {_literal(v)}" for k, v in consts.items()]
    text = "@nki.jit\n" + "\n".join(body_lines).rstrip() + "\n"
    params = tuple(a.arg for a in node.args.args)
    return text, params, node.name


def _literal(v: Any) -> str:
    """A constant as kernel source: ``inf``/``nan`` are no Python names, so they are spelled as the
    ``float('inf')`` literal the kernel check accepts."""
    if isinstance(v, float) and v != v:
        return "float('nan')"
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return "float('inf')" if v > 0 else "float('-inf')"
    return repr(v)


def _build(op_name: str, kernel: Any) -> UserKernel:
    fn = python_function(kernel)
    emitted = "user_" + re.sub(r"\W", "_", op_name.replace("::", "_")) + "_" + fn.__name__
    source, params, name = kernel_source(kernel, emitted)
    return UserKernel(op_name, name, source, emitted, params, hashlib.sha256(source.encode()).hexdigest())


def register(op_name: str, kernel: Any) -> UserKernel:
    """Record ``kernel`` as the implementation of custom op ``op_name`` (replacing an earlier one)."""
    uk = _build(op_name, kernel)
    with _lock:
        _by_op[op_name] = uk
    return uk


#: TorchNeuron ``nki_op`` ops looked at, by op name (None: not such an op, or not of the known form)
_discovered: dict[str, UserKernel | None] = {}
_NKI_MODULES = ("nki", "torch_neuronx", "neuron_inductor.runtime")


def launched_kernel(launcher: Any) -> Any:
    """The ``@nki.jit`` kernel ``launcher`` launches when its body is ``return K(p0, p1, ...)`` (or
    ``K[grid](...)``) with exactly its own parameters in order; None otherwise."""
    if not inspect.isfunction(launcher):
        return None
    try:
        node = ast.parse(textwrap.dedent(inspect.getsource(launcher))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return None
    if not isinstance(node, ast.FunctionDef):
        return None
    body = [b for b in node.body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or not isinstance(body[0].value, ast.Call):
        return None
    call = body[0].value
    func = call.func.value if isinstance(call.func, ast.Subscript) else call.func
    params = [a.arg for a in node.args.args]
    if not isinstance(func, ast.Name) or call.keywords or \
            [a.id if isinstance(a, ast.Name) else None for a in call.args] != params:
        return None
    closure = {}
    if launcher.__closure__:
        closure = {n: c.cell_contents for n, c in zip(launcher.__code__.co_freevars, launcher.__closure__)}
    kernel = closure.get(func.id, launcher.__globals__.get(func.id))
    if kernel is None or not str(type(kernel).__module__).startswith(_NKI_MODULES):
        return None
    try:
        python_function(kernel)
    except UserKernelError:
        return None
    return kernel


def _torchneuron_op(op_name: str) -> UserKernel | None:
    """The kernel of a custom op declared with ``torch_neuronx.nki_op``, if it has the known form."""
    if op_name in _discovered:
        return _discovered[op_name]
    found = None
    if "torch" in sys.modules and not op_name.startswith(("aten::", "prims::")):
        try:
            from torch._library.custom_ops import OPDEFS
        except ImportError:  # pragma: no cover - torch without custom_op
            OPDEFS = {}
        opdef = OPDEFS.get(op_name)
        kernel = launched_kernel(getattr(opdef, "_init_fn", None))
        if kernel is not None:
            try:
                found = _build(op_name, kernel)
            except UserKernelError:
                found = None
    _discovered[op_name] = found
    return found


def unregister(op_name: str) -> None:
    with _lock:
        _by_op.pop(op_name, None)


#: the higher-order operator ``torch_neuronx.wrap_nki(kernel)[grid](...)`` traces to
NKI_HOP_NAME = "nki_kernel_wrapper"
_hop_kernels: dict[int, UserKernel] = {}


def is_nki_hop(target: Any) -> bool:
    """Whether an FX node target is TorchNeuron's ``nki_kernel_wrapper`` higher-order operator."""
    return getattr(target, "_name", None) == NKI_HOP_NAME and hasattr(target, "py_impl")


def hop_kernel(target: Any, kwargs: dict) -> tuple[UserKernel, list]:
    """The kernel an ``nki_kernel_wrapper`` node launches and its arguments in parameter order
    (tensor arguments as the node's values, non-tensor ones as constants).

    The kernel function is kept by ``kernel_registry`` of the module that defines the operator
    (``torch_neuronx``'s NKI higher-order-op module): ``get_func(kernel_idx)``,
    ``get_arg_names(kernel_idx)`` and ``get_constant_args(constant_args_key)``."""
    registry = getattr(sys.modules.get(type(target).__module__), "kernel_registry", None)
    if registry is None:
        raise UserKernelError(f"{NKI_HOP_NAME}: no kernel_registry in {type(target).__module__}")
    idx = kwargs["kernel_idx"]
    func = registry.get_func(idx)
    uk = _hop_kernels.get(id(func))
    if uk is None or uk.kernel_name != func.__name__:
        uk = _build(f"{NKI_HOP_NAME}::{func.__name__}_{idx}", func)
        _hop_kernels[id(func)] = uk
    by_name = dict(zip(kwargs["arg_names"], kwargs["args"]))
    consts = registry.get_constant_args(kwargs["constant_args_key"]) \
        if kwargs.get("constant_args_key", -1) != -1 else {}
    missing = [n for n in registry.get_arg_names(idx) if n not in by_name and n not in consts]
    if missing:
        raise UserKernelError(f"{NKI_HOP_NAME} call of {func.__name__}: no value for {missing}")
    return uk, [by_name[n] if n in by_name else consts[n] for n in registry.get_arg_names(idx)]


def lookup(target: Any) -> UserKernel | None:
    """The kernel registered for an FX node target (an ``OpOverload``), if any: by
    ``register_nki_kernel``, or declared the TorchNeuron way (``nki_op``)."""
    name = getattr(getattr(target, "_schema", None), "name", None)
    if not name:
        return None
    uk = _by_op.get(name)
    return uk if uk is not None else _torchneuron_op(name)


def registered() -> dict[str, UserKernel]:
    with _lock:
        return dict(_by_op)


def digests_in(gm: Any) -> dict[str, str]:
    """``{op name: kernel digest}`` for the user kernels ``gm`` calls (empty for most graphs)."""
    out = {}
    for n in gm.graph.nodes:
        if n.op == "call_function" and is_nki_hop(n.target):
            uk = hop_kernel(n.target, n.kwargs)[0]
            out[uk.op_name] = uk.digest
        elif n.op == "call_function":
            uk = lookup(n.target)
            if uk is not None:
                out[uk.op_name] = uk.digest
    return dict(sorted(out.items()))


# ---------------------------------------------------------------- what a kernel does with its parameters

def _kernel_def(source: str) -> ast.FunctionDef | None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)


def _base_name(e: ast.expr) -> str | None:
    """The name a tensor expression is rooted at (``x``, ``x[...]``, ``x.ap(...)``, ``x.reshape(...)``)."""
    while True:
        if isinstance(e, ast.Name):
            return e.id
        if isinstance(e, ast.Subscript):
            e = e.value
        elif isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in ("ap", "reshape"):
            e = e.func.value
        elif isinstance(e, ast.Attribute):
            e = e.value
        else:
            return None


def written_params(source: str) -> set[str]:
    """Parameters the kernel writes: the destination (``dst=`` or the first positional argument) of
    an ``nisa`` instruction rooted at a parameter or at a name bound to a view of one."""
    fn = _kernel_def(source)
    if fn is None:
        return set()
    params = [a.arg for a in fn.args.args]
    alias = {p: p for p in params}
    for node in ast.walk(fn):  # ``v = x[...]`` / ``v = x.reshape(...)``: v views parameter x
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            base = _base_name(node.value)
            if base in alias and not isinstance(node.value, ast.Attribute):
                alias[node.targets[0].id] = alias[base]
    out = set()
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "nisa"):
            continue
        dsts = [k.value for k in node.keywords if k.arg == "dst"] or node.args[:1]
        for d in dsts:
            base = _base_name(d)
            if base in alias:
                out.add(alias[base])
    return out


def shape_ranks(source: str) -> dict[str, int]:
    """``{param: rank}`` for each ``a, b = param.shape`` unpacking in the kernel: the rank it assumes."""
    fn = _kernel_def(source)
    out: dict[str, int] = {}
    if fn is None:
        return out
    params = {a.arg for a in fn.args.args}
    for node in ast.walk(fn):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], (ast.Tuple, ast.List))
                and not any(isinstance(e, ast.Starred) for e in node.targets[0].elts)
                and isinstance(node.value, ast.Attribute) and node.value.attr == "shape"
                and isinstance(node.value.value, ast.Name) and node.value.value.id in params):
            out.setdefault(node.value.value.id, len(node.targets[0].elts))
    return out
