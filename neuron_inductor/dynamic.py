"""Symbolic shapes from Dynamo are specialised per concrete shape at call time.

Trainium kernels are static: every distinct shape is its own compile. When Dynamo hands us a graph with
symbolic sizes (``dynamic=True``, ``mark_dynamic``, or its automatic dynamic after a second shape) we do
not emit dynamic kernels. We keep Dynamo's single graph and, on each call, compile it for the concrete
shapes of the arguments — through the same shape-keyed cache, so each (graph, shape) is compiled once
ever, across calls, processes and ranks. With inputs padded to 128-token buckets
(``neuron_inductor.bucketing``) the set of shapes, and so of compiles, stays small.

The symbolic sizes Dynamo passes as extra ``SymInt`` inputs are substituted by their concrete values
before tracing, so a specialisation is the very graph a static capture of that shape gives, with the
same cache key. That matters with Dynamo's default automatic dynamic: the first shape is captured
statically and every later one goes through the symbolic graph; without the substitution the first
shape would be compiled twice (once per graph flavour) and a second process would miss on it.

Dynamo's ``recompile_limit`` counts Dynamo graphs, not our specialisations: automatic dynamic gives
two Dynamo graphs (the first, static shape and the symbolic one) however many buckets there are, so
the default limit of 8 is enough. Only ``dynamic=False`` (one Dynamo graph per shape) needs it raised
to the bucket count (:func:`neuron_inductor.bucketing.recommended_recompile_limit`).
"""
from __future__ import annotations

import logging
import warnings
from typing import Any, Callable

import torch
import torch.fx as fx

from .config import Config

log = logging.getLogger("neuron_inductor")

#: distinct shapes one symbolic graph may be specialised for before we warn (once) that the data
#: is probably not bucketed: every one of them is a full compile.
MANY_SHAPES = 16

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _signature(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return ("T", tuple(a.shape), tuple(a.stride()), a.dtype, a.requires_grad, a.device.type)
    if isinstance(a, (int, float, bool)):
        return ("S", a)
    return ("O", type(a).__name__)


def specialize_graph(gm: fx.GraphModule, symbolic: list[int], args: list) -> fx.GraphModule:
    """``gm`` with placeholders at positions ``symbolic`` replaced by the concrete ``args`` there.

    The result takes only the remaining inputs, in their order: the graph a static capture of the
    same shapes gives.
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(args):
        raise ValueError(f"graph has {len(placeholders)} inputs, called with {len(args)}")
    val_map: dict[fx.Node, Any] = {}
    for i in symbolic:
        value = args[i]
        if not isinstance(value, (int, float, bool)):
            raise TypeError(f"symbolic input {placeholders[i].name} got {type(value).__name__}, "
                            "expected a concrete int/float/bool")
        val_map[placeholders[i]] = value
    graph = fx.Graph()
    out = graph.graph_copy(gm.graph, val_map, return_output_node=True)
    if out is not None:
        rv, out_node = out
        graph.output(rv, type_expr=out_node.type).meta = dict(out_node.meta)
    graph._codegen = gm.graph._codegen
    new = fx.GraphModule(gm, graph, class_name=type(gm).__name__)
    new.meta = dict(getattr(gm, "meta", {}))
    return new


class ShapeSpecializer:
    """Callable standing in for a symbolic graph; one static compile per concrete signature."""

    def __init__(self, gm: fx.GraphModule, cfg: Config, symbolic: list[int] | None = None,
                 compile_static: Callable[[fx.GraphModule, list, Config], Callable] | None = None) -> None:
        # The static compiler is passed in by the backend (its caller) so this module never
        # imports the backend back; None means the backend's own static path.
        self.gm = gm
        self.compile_static = compile_static
        self.cfg = cfg
        self.symbolic = list(symbolic or [])
        self.compiled: dict[tuple, tuple[Callable, list[int]]] = {}
        self._warned = False

    def __call__(self, *args: Any) -> Any:
        key = tuple(_signature(a) for a in args)
        hit = self.compiled.get(key)
        if hit is None:
            hit = self._specialise(list(args))
            self.compiled[key] = hit
        fn, keep = hit
        return fn(*[args[i] for i in keep])

    def _specialise(self, args: list) -> tuple[Callable, list[int]]:
        log.debug("specialising symbolic graph for %s", [_signature(a) for a in args])
        if len(self.compiled) + 1 > MANY_SHAPES and not self._warned:
            self._warned = True
            warnings.warn(
                f"neuron_inductor: one graph has now been compiled for {len(self.compiled) + 1} "
                "distinct input shapes; every shape is a full compile on Trainium. Pad the data to "
                "128-token buckets (neuron_inductor.bucketing.BucketingCollator) to bound them.",
                stacklevel=3)
        skip = set(self.symbolic)
        keep = [i for i in range(len(args)) if i not in skip]
        static = specialize_graph(self.gm, self.symbolic, args)
        if self.compile_static is None:
            raise RuntimeError("ShapeSpecializer needs the backend's static compiler (compile_static)")
        return self.compile_static(static, [args[i] for i in keep], self.cfg), keep


def symbolic_positions(example_inputs: list) -> list[int]:
    """Positions of the plain symbolic scalars (sizes Dynamo passes as inputs)."""
    return [i for i, x in enumerate(example_inputs) if isinstance(x, _SYMBOLIC)]


def specialize_per_shape(gm: fx.GraphModule, example_inputs: list, cfg: Config,
                         compile_static: Callable[[fx.GraphModule, list, Config], Callable]) -> Callable:
    """One static compile (by ``compile_static``) per concrete signature of a symbolic graph."""
    return ShapeSpecializer(gm, cfg, symbolic_positions(example_inputs), compile_static)
