"""The stack of kernel calls running on this thread (innermost last).

A leaf module so that both the error builder (which names the running kernel and its source line)
and the kernel state can read it without importing each other.
"""
from __future__ import annotations

import threading
from typing import Any

_local = threading.local()


def stack() -> list[Any]:
    """This thread's running kernel contexts (``state.KernelContext``), innermost last."""
    s = getattr(_local, "stack", None)
    if s is None:
        s = _local.stack = []
    return s


def current() -> Any:
    """The innermost running ``state.KernelContext``, or None outside a kernel."""
    s = stack()
    return s[-1] if s else None
