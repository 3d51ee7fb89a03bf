"""The host-side program of one compiled graph: what the wrapper does, in order.

Lowering produces a ``Program``; codegen prints it as the wrapper module. Host values are named
strings. The wrapper may only allocate, take views, launch kernels, call *declared* fallbacks and
declared collectives; anything else belongs in a kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence, Union

from .nodes import Kernel


def contiguous_strides(size: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides of ``size``; an empty or unit dim steps like a unit one (as torch's do)."""
    out, acc = [], 1
    for s in reversed(list(size)):
        out.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(out))


@dataclass(frozen=True)
class TensorMeta:
    """Logical layout of a host tensor (from the FX node's fake value)."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    dtype: str  # torch dtype name without the "torch." prefix, e.g. "float32", "int64", "bool"

    @property
    def numel(self) -> int:
        n = 1
        for s in self.size:
            n *= s
        return n

    @property
    def extent(self) -> int:
        """Elements of the smallest contiguous span holding every element (0 when empty)."""
        if self.numel == 0:
            return 0
        return 1 + sum((s - 1) * st for s, st in zip(self.size, self.stride))


@dataclass(eq=False)
class KernelCall:
    """``results = kernel(*flat spans of args)``. ``args`` name host tensors; the wrapper passes each
    as its flat span (``hbm_view``), reinterpreted to the kernel parameter's hardware dtype
    (int64 -> int32 words, bool -> uint8). Each result is the returned flat buffer, and
    ``result_meta`` gives the logical view the wrapper takes of it."""

    kernel: Kernel
    args: list[str]
    results: list[str]
    result_meta: list[TensorMeta]


@dataclass(eq=False)
class View:
    """``name = torch.as_strided(base, size, stride, base.storage_offset() + offset)`` — a view,
    never a copy. ``meta.storage_offset`` is relative to ``base``'s own offset: a graph input's offset
    is not part of what a compiled graph is specialised on (Dynamo does not guard it, the cache key
    does not hold it), so a per-expert slice of a packed weight arrives at a different offset on
    every call and the view must follow it."""

    name: str
    base: str
    meta: TensorMeta


@dataclass(eq=False)
class Empty:
    """``name = torch.empty_strided(...)`` — for outputs with no elements."""

    name: str
    meta: TensorMeta


@dataclass(eq=False)
class RngKey(Empty):
    """``name = host.rng_key(...)`` — a few random int32 words drawn from torch's default generator:
    the key of a counter-based generator whose stream the kernels compute. Drawing it is the
    generator's job, not a missing lowering, so it is no fallback (and it advances the generator,
    so ``torch.manual_seed`` reproduces runs and successive calls differ)."""


@dataclass(eq=False)
class Fallback:
    """A declared fallback: run ATen op ``target`` (e.g. ``"aten.native_dropout.default"``) eagerly on
    the host. ``args``/``kwargs`` hold host value names (wrapped in ``Ref``) and constants."""

    results: list[str]  # names bound to the op's outputs (a tuple result is unpacked)
    target: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    reason: str
    shapes: str = ""
    unpack: bool = False  # the op returns a tuple/list that is unpacked into ``results``
    #: per result, the dtype name the graph's fake tensor has (None: not a tensor); the wrapper
    #: converts an eager result of another dtype (some CPU kernels disagree with their meta)
    dtypes: tuple[str | None, ...] = ()


@dataclass(eq=False)
class Collective:
    """A declared collective: functional collective ``target`` (``"_c10d_functional.all_reduce.default"``,
    ``...wait_tensor.default``...) called on the host through torch's process group. Communication
    is not a kernel's job and not a missing lowering, so it is counted apart from fallbacks. Same
    argument conventions as :class:`Fallback`."""

    results: list[str]
    target: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    unpack: bool = False


@dataclass(eq=False)
class UserKernelCall:
    """``results = kernel(*args)`` for a hand-written NKI kernel registered for custom op ``op``.

    Unlike a :class:`KernelCall`, the kernel was not generated from tile IR: its source (in
    ``Program.user_kernels``) is the user's, and it takes each tensor as a dense HBM tensor of its
    logical shape (``Ref`` args; lowering made them contiguous) and non-tensor arguments as Python
    values. It returns one HBM array per entry of ``results``, of exactly ``result_meta``'s shape
    and dtype (the wrapper checks)."""

    kernel: str                # function name in the graph's kernels module
    op: str                    # "namespace::name" of the custom op it implements
    args: tuple[Any, ...]
    results: list[str]
    result_meta: list[TensorMeta]


@dataclass(frozen=True)
class Ref:
    """A reference to a host value by name inside fallback arguments."""

    name: str


Step = Union[KernelCall, UserKernelCall, View, Empty, Fallback, Collective]


@dataclass(eq=False)
class Program:
    name: str
    inputs: list[str]
    input_meta: list[TensorMeta | None]
    steps: list[Step] = field(default_factory=list)
    #: each output is a host value name (``Ref``) or a Python constant (``None``, an int, ...)
    outputs: list[Any] = field(default_factory=list)
    #: tensor constants of the graph (``get_attr``), created once when the wrapper module loads
    constants: dict[str, Any] = field(default_factory=dict)
    #: sources of the hand-written kernels the program calls, by their function name
    user_kernels: dict[str, str] = field(default_factory=dict)

    @property
    def kernels(self) -> list[Kernel]:
        return [s.kernel for s in self.steps if isinstance(s, KernelCall)]

    @property
    def user_kernel_calls(self) -> list[UserKernelCall]:
        return [s for s in self.steps if isinstance(s, UserKernelCall)]

    @property
    def fallbacks(self) -> list[Fallback]:
        return [s for s in self.steps if isinstance(s, Fallback)]

    @property
    def collectives(self) -> list[Collective]:
        return [s for s in self.steps if isinstance(s, Collective)]
