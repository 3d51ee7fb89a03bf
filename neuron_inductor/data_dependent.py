"""One warning when a model's Python numbers read from tensor data make Dynamo recompile.

Some models turn tensor values into Python ints and let them decide shapes: jetmoe's experts split
their tokens with ``expert_size.tolist()``. Dynamo breaks the graph at the read (a "Data dependent
operator" graph break) and, in the frame that resumes after it, guards on each int's value, so every
new value (a new routing pattern of the experts, in jetmoe every decode step) compiles a new graph,
and past ``torch._dynamo.config.recompile_limit`` the frame silently runs eagerly. Static kernels
cannot take those shapes as symbols either, so the number of graphs is the model's; what we owe the
user is the cause and the fix, once, instead of a slow run with no word.

:func:`warn_data_dependent_recompiles` is called for every Dynamo graph our backend gets. It warns
when a frame is compiled for the third time (prefill and decode are two) because a guard of the form
``___stack<i>... == <int>`` failed (a value on the stack Dynamo resumed with after a graph break: the
read's result), and a data-dependent graph break has happened in this process. A plain Python int
argument that changes (``L['n'] == 3``) is the caller's value, not data, and gets no warning.
"""
from __future__ import annotations

import re
import warnings

#: start of the graph-break reason Dynamo counts for ``.tolist()`` / ``.item()`` on a tensor
_DATA_DEPENDENT = "Data dependent operator"
#: a failed guard on the value of a Python int the frame resumed with after a graph break (not on a
#: tensor's size or stride), as Dynamo words it: ``1/0: ___stack0[3][0] == 4   # source line  # file:line``
_INT_GUARD = re.compile(r"^\s*(?:\d+/\d+:\s*)?(?P<expr>___stack\d+[^#\s]*)\s*==\s*-?\d+\s*(?:#|$)")

_warned = [False]


def reset() -> None:
    """Allow the warning again (tests)."""
    _warned[0] = False


def _recompile_reason() -> str | None:
    """The first failed guard of the frame Dynamo is compiling now, if it is a recompile."""
    try:
        from torch._dynamo.utils import get_metrics_context
        ctx = get_metrics_context()
        return ctx._metrics.get("recompile_reason") if ctx.in_progress() else None
    except Exception:  # noqa: BLE001 - a torch without these internals gets no warning, never an error
        return None


def _data_dependent_break() -> str | None:
    """Where a data-dependent graph break happened in this process (its counted reason), if any."""
    from torch._dynamo.utils import counters
    return next((k for k in counters["graph_break"] if str(k).startswith(_DATA_DEPENDENT)), None)


def warn_data_dependent_recompiles() -> bool:
    """Warn once per process (see the module docstring); True when this call warned."""
    if _warned[0]:
        return False
    from torch._guards import CompileContext
    cid = CompileContext.current_compile_id()
    if cid is None or cid.frame_compile_id is None or cid.frame_compile_id < 2:
        return False
    reason = _recompile_reason()
    first = (reason or "").splitlines()[0] if reason else ""
    m = _INT_GUARD.match(first)
    if m is None or re.search(r"\.(size|stride|storage_offset)\(", m.group("expr")):
        return False
    if _data_dependent_break() is None:
        return False
    _warned[0] = True
    guard, _, where = first.partition("#")
    warnings.warn(
        f"neuron_inductor: a frame is being compiled for the {_nth(cid.frame_compile_id + 1)} time because "
        f"a Python number read from tensor data decides a shape there (failed guard `{guard.strip()}`"
        f"{', at ' + where.strip() if where.strip() else ''}; the number comes from a data-dependent "
        "graph break: `.tolist()` / `.item()` on a tensor). Every new value compiles a new graph, and "
        "past torch._dynamo.config.recompile_limit the frame runs eagerly. Fix: use the model's "
        "static-shape path if it has one (transformers MoE models: experts_implementation=\"batched_mm\"); "
        "otherwise raise torch._dynamo.config.recompile_limit to the number of distinct values (each "
        "graph is compiled once and cached) or run this model eagerly. TORCH_LOGS=recompiles,graph_breaks "
        "shows each guard and the graph break.",
        stacklevel=2)
    return True


def _nth(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
