"""Small helpers for running Hugging Face causal LMs through ``backend="neuron"``.

Why these exist: ``generate(..., cache_implementation="static")`` is the inference path that suits
Trainium (one static shape for prefill, one for every decode step), but only if the compiled forward is
*reused* across decode steps. :func:`compile_forward` compiles the model's forward with static shapes and
:class:`CompileProbe` records how many Dynamo graphs exist after each call, so a caller (test, benchmark)
can prove that decode steps after the first compile nothing.

Sliding-window and chunked-attention models need one more thing: transformers' stock static
sliding-window cache layer recompiles every decode step; :func:`install` registers a layer that does
not (see :func:`sliding_layer_class`). It runs by itself when transformers loads, so users never call it.

Nothing here imports ``transformers`` at import time: the helpers work on any ``nn.Module`` with a
``forward``/``generate``.
"""
from __future__ import annotations

import functools
import logging
import sys
from typing import Any, Callable

import torch

log = logging.getLogger("neuron_inductor")


def dynamo_graph_count() -> int:
    """Graphs Dynamo has handed to a backend in this process so far.

    A running total: ``torch._dynamo.reset()`` does not clear Dynamo's counters, so compare two
    readings (as :class:`CompileProbe` does) rather than reading one absolute value.
    """
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


def neuron_active() -> bool:
    """Whether ``backend="neuron"`` is in use in this process (torch imports our backend module
    when ``torch.compile(..., backend="neuron")`` or transformers' ``CompileConfig(backend="neuron")``
    looks the name up)."""
    return sys.modules.get("neuron_inductor.backend") is not None


def sliding_layer_class(base: type | None = None) -> type:
    """transformers' ``StaticSlidingWindowLayer`` (or ``base``, one of its subclasses in
    ``cache_utils`` such as the hybrid linear-attention + sliding-window layer), made shape- and
    guard-stable under our backend.

    The stock layer keeps its fill level in a Python int (``cumulative_length_int``) that decides its
    branches and mask offsets, so Dynamo guards on its value and every decode step recompiles (past
    ``recompile_limit`` the model silently runs eagerly). When the neuron backend is in use, this
    layer instead stores every position up to the cache length, like a full-attention
    ``StaticLayer`` whose length is a tensor, and stays flagged sliding so transformers' mask
    functions apply the window (or chunk) rule on absolute positions: the same attention, one decode
    graph. The cost is cache memory of ``max_cache_len`` instead of ``sliding_window`` positions per
    sliding layer. The choice is made at the layer's first use (after generate compiled its forward);
    without our backend it is the stock layer, unchanged.
    """
    from transformers.cache_utils import StaticSlidingWindowLayer
    return _full_length_class(base or StaticSlidingWindowLayer)


@functools.lru_cache(maxsize=None)
def _full_length_class(base: type) -> type:
    """:func:`sliding_layer_class` for one ``base`` (cached: the registry needs a stable identity)."""
    from transformers.cache_utils import StaticLayer

    class NeuronSlidingWindowLayer(base):  # type: ignore[misc, valid-type]
        def __init__(self, max_cache_len: int, sliding_window: int, **kwargs: Any) -> None:
            super().__init__(max_cache_len=max_cache_len, sliding_window=sliding_window, **kwargs)
            self._total_len = max_cache_len
            self.full_length: bool | None = None  # decided at first use

        def _decide(self) -> bool:
            if self.full_length is None:
                self.full_length = neuron_active()
                if self.full_length:
                    self.max_cache_len = self._total_len
                    self._is_croppable = True
            return self.full_length

        def lazy_initialization(self, *args: Any, **kwargs: Any) -> None:
            if len(args) == 2 and not kwargs:  # the attention cache (key, value); a hybrid layer's
                self._decide()                 # recurrent states come as keywords
            super().lazy_initialization(*args, **kwargs)

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
                   **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            if self._decide():
                return StaticLayer.update(self, key_states, value_states, *args, **kwargs)
            return super().update(key_states, value_states, *args, **kwargs)

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            if self._decide():
                return StaticLayer.get_mask_sizes(self, query_length)
            return super().get_mask_sizes(query_length)

        def get_seq_length(self) -> Any:
            if self._decide():
                return StaticLayer.get_seq_length(self)
            return super().get_seq_length()

        def crop(self, tokens_to_remove: int) -> None:
            if self._decide():
                StaticLayer.crop(self, tokens_to_remove)
            else:
                super().crop(tokens_to_remove)

    NeuronSlidingWindowLayer.__name__ = NeuronSlidingWindowLayer.__qualname__ = f"Neuron{base.__name__}"
    return NeuronSlidingWindowLayer


def _stock_sliding(cache_utils: Any, cls: Any) -> bool:
    """Whether ``cls`` is transformers' own static sliding-window layer or a ``cache_utils`` subclass
    of it (the layers whose Python-int fill level recompiles every decode step)."""
    stock = getattr(cache_utils, "StaticSlidingWindowLayer", None)
    return isinstance(cls, type) and stock is not None and issubclass(cls, stock) and \
        cls.__module__ == cache_utils.__name__


#: transformers' static-cache layer types that the stock sliding-window layer serves
SLIDING_LAYER_TYPES = ("sliding_attention", "chunked_attention")


def install(cache_utils: Any = None) -> bool:
    """Make transformers build :func:`sliding_layer_class` layers for sliding-window and chunked
    attention (and the hybrid linear-attention + sliding-window layers, built on the same stock
    layer) in every ``StaticCache`` (what ``generate(cache_implementation="static")`` uses).

    Uses transformers' layer-type registry (``STATIC_LAYER_TYPE_MAPPING``, the table its own
    modeling files extend); replaces only entries that still hold a stock layer of ``cache_utils``,
    so a user's own registration wins. Idempotent; returns whether the registry now holds our layer. Runs
    automatically when our backend module is imported after transformers, and on a Trainium host
    when ``transformers.cache_utils`` is imported (the ``torch.backends`` autoload hook).
    """
    if cache_utils is None:
        from transformers import cache_utils
    mapping = getattr(cache_utils, "STATIC_LAYER_TYPE_MAPPING", None)
    if mapping is None or getattr(cache_utils, "StaticSlidingWindowLayer", None) is None:
        return False
    for kind, cls in list(mapping.items()):
        if _stock_sliding(cache_utils, cls):
            mapping[kind] = sliding_layer_class(cls)
    return any(mapping.get(kind) is sliding_layer_class() for kind in SLIDING_LAYER_TYPES)


def install_if_loaded() -> None:
    """:func:`install` if transformers' cache module is already imported (never imports it)."""
    if "transformers.cache_utils" in sys.modules:
        try:
            install()
        except Exception as e:  # noqa: BLE001 - an unexpected transformers must not break compiling
            log.warning("neuron_inductor: could not register the static sliding-window cache layer "
                        "(%s: %s); sliding-window generate may recompile every decode step",
                        type(e).__name__, e)


_warned_recompiles = [False]


def warn_stock_sliding_recompiles() -> None:
    """Called for every Dynamo graph our backend gets: one warning when a frame is compiled a third
    time while transformers' stock static sliding-window layer is what ``StaticCache`` builds (our
    layer was not registered before the cache was created, or another registration replaced it).

    That layer's Python-int fill level fails Dynamo's guards every decode step, so generate
    recompiles each step and, past ``torch._dynamo.config.recompile_limit``, runs eagerly.
    """
    if _warned_recompiles[0] or "transformers.cache_utils" not in sys.modules:
        return
    from torch._guards import CompileContext
    cid = CompileContext.current_compile_id()
    if cid is None or cid.frame_compile_id is None or cid.frame_compile_id < 2:
        return
    cache_utils = sys.modules["transformers.cache_utils"]
    mapping = getattr(cache_utils, "STATIC_LAYER_TYPE_MAPPING", {})
    if not any(_stock_sliding(cache_utils, cls) for cls in mapping.values()):
        return
    _warned_recompiles[0] = True
    log.warning(
        "neuron_inductor: a frame is being compiled for the %d%s time while transformers' stock "
        "StaticSlidingWindowLayer builds static sliding-window caches. Its Python-int fill level makes "
        "every decode step of a sliding-window model recompile, and past "
        "torch._dynamo.config.recompile_limit the model runs eagerly. Fix: call "
        "neuron_inductor.integrations.hf.install() (or import neuron_inductor.backend) before "
        "generate() builds its cache; TORCH_LOGS=recompiles shows the failing guard.",
        cid.frame_compile_id + 1, "th" if cid.frame_compile_id >= 3 else "rd")


def static_cache(model: Any, max_cache_len: int) -> tuple[Any, bool]:
    """A ``StaticCache`` for ``model`` whose sliding-window layers never recompile under our backend.

    Kept for callers that build their cache themselves: it is the cache ``generate(
    cache_implementation="static")`` now builds anyway once :func:`install` has run. Returns the cache
    and whether any layer is a sliding one.
    """
    from transformers.cache_utils import StaticCache, StaticSlidingWindowLayer

    install()
    cache = StaticCache(config=model.config, max_cache_len=max_cache_len)
    sliding = False
    for i, layer in enumerate(cache.layers):
        if type(layer) is StaticSlidingWindowLayer:
            cache.layers[i] = sliding_layer_class()(max_cache_len=max_cache_len,
                                                    sliding_window=layer.max_cache_len)
        sliding = sliding or isinstance(layer, StaticSlidingWindowLayer)
    return cache, sliding


def static_generate(model: Any, input_ids: torch.Tensor, max_new_tokens: int = 4,
                    **kwargs: Any) -> Any:
    """Greedy generation with a static KV cache (the shape-stable path a compiled forward wants).

    Plain ``cache_implementation="static"``: sliding-window and chunked-attention layers are made
    recompile-free by :func:`install`, which runs without the caller doing anything. Returns what
    ``generate`` returns: the token tensor, or its output object with ``return_dict_in_generate=True``.
    """
    attention_mask = kwargs.pop("attention_mask", torch.ones_like(input_ids))
    install_if_loaded()
    with torch.no_grad():
        return model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=max_new_tokens,
                              do_sample=False, cache_implementation="static", **kwargs)
