"""Small helpers for running Hugging Face causal LMs through ``backend="neuron"``.

Why these exist: ``generate(..., cache_implementation="static")`` is the inference path that suits
Trainium (one static shape for prefill, one for every decode step), but only if the compiled forward is
*reused* across decode steps. :func:`compile_forward` compiles the model's forward with static shapes and
:class:`CompileProbe` records how many Dynamo graphs exist after each call, so a caller (test, benchmark)
can prove that decode steps after the first compile nothing.

Nothing here imports ``transformers``: the helpers work on any ``nn.Module`` with a ``forward``/``generate``.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch


def dynamo_graph_count() -> int:
    """Graphs Dynamo has handed to a backend in this process (since the last ``torch._dynamo.reset``)."""
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])


class CompileProbe:
    """Wraps a compiled callable; after every call, remembers the Dynamo graph count.

    ``graphs_after[i]`` is the count after call ``i``; in static-cache generation call 0 is the prefill,
    call 1 the first decode step (a new shape: one compile), and every later call must add nothing.
    """

    def __init__(self, fn: Callable[..., Any], wraps: Callable[..., Any] | None = None) -> None:
        self.fn = fn
        self.graphs_after: list[int] = []
        # generate() inspects forward's signature (e.g. it passes position_ids only when forward
        # names them; without them Mistral reads a Python-int cache length and recompiles each step)
        functools.update_wrapper(self, wraps or fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self.fn(*args, **kwargs)
        self.graphs_after.append(dynamo_graph_count())
        return out

    def decode_recompiles(self) -> int:
        """Graphs compiled after the first decode step (0 when the decode step is reused)."""
        if len(self.graphs_after) < 3:
            return 0
        return self.graphs_after[-1] - self.graphs_after[1]


def compile_forward(model: torch.nn.Module, options: dict[str, Any] | None = None,
                    fullgraph: bool = False) -> CompileProbe:
    """Replace ``model.forward`` by a static-shape ``backend="neuron"`` compile of it; return the probe.

    ``dynamic=False`` because Trainium kernels are static: prefill and decode are two shapes, two
    compiles, and Dynamo's automatic-dynamic would otherwise turn the second shape symbolic.
    Undo with :func:`restore_forward`.
    """
    compiled = torch.compile(model.forward, backend="neuron", dynamic=False, fullgraph=fullgraph,
                             options=options or None)
    eager = model.forward
    probe = CompileProbe(compiled, wraps=eager)
    model.__dict__.setdefault("_neuron_eager_forward", eager)
    model.forward = probe  # type: ignore[method-assign]
    return probe


def restore_forward(model: torch.nn.Module) -> None:
    """Undo :func:`compile_forward`."""
    eager = model.__dict__.pop("_neuron_eager_forward", None)
    if eager is not None:
        model.forward = eager  # type: ignore[method-assign]


def static_cache(model: Any, max_cache_len: int) -> tuple[Any, bool]:
    """A ``StaticCache`` for ``model`` whose sliding-window layers are static when the window is not hit.

    transformers' ``StaticSlidingWindowLayer`` tracks its fill level in a Python int
    (``cumulative_length_int``) that Dynamo specialises, so with static shapes every decode step of a
    sliding-window model (Mistral v0.1, Gemma 2/3, ...) recompiles. While ``max_cache_len`` fits in the
    window, such a layer never rolls and behaves exactly like a ``StaticLayer`` that keeps its length in
    a tensor; we swap those in (still flagged sliding, so masks keep the window rule). Returns the cache
    and whether any layer was swapped.
    """
    from transformers.cache_utils import StaticCache, StaticLayer, StaticSlidingWindowLayer

    class InWindowSlidingLayer(StaticLayer):
        is_sliding = True

    cache = StaticCache(config=model.config, max_cache_len=max_cache_len)
    swapped = False
    for i, layer in enumerate(cache.layers):
        if isinstance(layer, StaticSlidingWindowLayer) and layer.max_cache_len >= max_cache_len:
            cache.layers[i] = InWindowSlidingLayer(max_cache_len=max_cache_len)
            swapped = True
    return cache, swapped


def static_generate(model: Any, input_ids: torch.Tensor, max_new_tokens: int = 4,
                    **kwargs: Any) -> Any:
    """Greedy generation with a static KV cache (the shape-stable path a compiled forward wants).

    ``cache_implementation="static"``, except for sliding-window models, which get
    :func:`static_cache` (same results, no recompile per decode step). Returns what ``generate``
    returns: the token tensor, or its output object with ``return_dict_in_generate=True``.
    """
    attention_mask = kwargs.pop("attention_mask", torch.ones_like(input_ids))
    cache, swapped = static_cache(model, input_ids.shape[1] + max_new_tokens)
    how = {"cache": cache} if swapped else {"cache_implementation": "static"}
    with torch.no_grad():
        return model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=max_new_tokens,
                              do_sample=False, **how, **kwargs)
