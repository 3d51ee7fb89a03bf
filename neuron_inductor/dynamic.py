"""Symbolic shapes from Dynamo are specialised per concrete shape at call time.

Trainium kernels are static: every distinct shape is its own compile. When Dynamo hands us a graph with
symbolic sizes (``dynamic=True``, ``mark_dynamic``, or its automatic dynamic after a second shape) we do
not emit dynamic kernels. We keep Dynamo's single graph and, on each call, compile it for the concrete
shapes of the arguments — through the same shape-keyed cache, so each (graph, shape) is compiled once
ever, across calls, processes and ranks. With inputs padded to 128-token buckets
(``neuron_inductor.bucketing``) the set of shapes, and so of compiles, stays small.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

import torch
import torch.fx as fx

from .config import Config

log = logging.getLogger("neuron_inductor")


def _signature(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return ("T", tuple(a.shape), tuple(a.stride()), a.dtype, a.requires_grad, a.device.type)
    if isinstance(a, (int, float, bool)):
        return ("S", a)
    return ("O", type(a).__name__)


class ShapeSpecializer:
    """Callable standing in for a symbolic graph; one static compile per concrete signature."""

    def __init__(self, gm: fx.GraphModule, cfg: Config) -> None:
        self.gm = gm
        self.cfg = cfg
        self.compiled: dict[tuple, Callable] = {}

    def __call__(self, *args: Any) -> Any:
        key = tuple(_signature(a) for a in args)
        fn = self.compiled.get(key)
        if fn is None:
            from .backend import compile_dynamo_graph
            log.debug("specialising symbolic graph for %s", key)
            fn = compile_dynamo_graph(self.gm, list(args), self.cfg)
            self.compiled[key] = fn
        return fn(*args)


def specialize_per_shape(gm: fx.GraphModule, example_inputs: list, cfg: Config) -> Callable:
    return ShapeSpecializer(gm, cfg)
