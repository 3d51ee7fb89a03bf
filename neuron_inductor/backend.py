"""The Dynamo entry point: ``torch.compile(model, backend="neuron", options={...})``.

Dynamo hands us an FX graph of torch-level ops; AOTAutograd traces it into functional ATen forward and
backward graphs (with our decomposition table and the min-cut partitioner deciding what the backward
recomputes) and calls our compilers, each of which goes through :func:`compile.compile_graph`.
Attention is traced as torch's CPU flash op (lowered to our flash kernels) or its math form.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable

import torch
import torch.fx as fx

from .config import Config, get_config
from .autoselect import register_hf_cache_layers
from .data_dependent import warn_data_dependent_recompiles
from .integrations.hf import warn_stock_sliding_recompiles

log = logging.getLogger("neuron_inductor")
# register the recompile-free static sliding-window cache layer before generate builds a cache:
# now if transformers is loaded, else when it loads (our backend may be imported first)
register_hf_cache_layers()


def _sdpa_backends():
    """The SDPA backends attention is traced with: torch's CPU flash op when it qualifies (one forward
    and one backward op, lowered to our flash kernels), else the math form. Cases our kernels cannot
    take are decomposed to math by the decomposition table."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH], set_priority=True)
    except Exception:  # pragma: no cover - older torch
        return contextlib.nullcontext()


def _make_compiler(kind: str, cfg: Config, name: str, rec: Any) -> Callable:
    """An AOTAutograd compiler for ``kind`` graphs; ``rec`` is the Dynamo-level cache recording the
    ATen graphs feed (``cache.dynamo.Recording``, or ``None``), passed explicitly: AOTAutograd may
    call the backward compiler much later, from another thread."""
    from .cache import dynamo as dynamo_tier
    from .compile import compile_graph

    def compiler(gm: fx.GraphModule, example_inputs: list) -> Callable:
        gm._neuron_name = name  # type: ignore[attr-defined]
        dynamo_tier.note_aten_graph(rec, kind, gm, example_inputs)
        fn = compile_graph(gm, example_inputs, kind, cfg, record_into=rec)
        if kind == "backward":
            dynamo_tier.backward_compiled(rec)

        def run(args: list):  # AOTAutograd's boxed calling convention: one list, ours to clear
            return fn(args)
        run._boxed_call = True  # type: ignore[attr-defined]
        return run
    return compiler


def _has_symbolic_inputs(example_inputs: list) -> bool:
    for x in example_inputs:
        if isinstance(x, torch.SymInt):
            return True
        if isinstance(x, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in x.shape):
            return True
    return False


def neuron_backend(gm: fx.GraphModule, example_inputs: list, options: dict[str, Any] | None = None,
                   **kwargs: Any) -> Callable:
    """Compile a Dynamo graph for Trainium (simulated on machines without one)."""
    from .compile import gc_paused

    cfg = get_config().replace(**(options or {}))
    warn_stock_sliding_recompiles()
    warn_data_dependent_recompiles()
    with gc_paused():
        if _has_symbolic_inputs(example_inputs):
            from .dynamic import specialize_per_shape
            return specialize_per_shape(gm, example_inputs, cfg, compile_dynamo_graph)
        return compile_dynamo_graph(gm, example_inputs, cfg)


_graph_count = [0]


def compile_dynamo_graph(gm: fx.GraphModule, example_inputs: list, cfg: Config) -> Callable:
    """Through the Dynamo-level cache tier (a hit skips AOTAutograd and building the decomposition
    table), else AOTAutograd with our compilers, each of which goes through the ATen-level tier."""
    from .cache import compile_dynamo_cached

    name = f"g{_graph_count[0]}"
    _graph_count[0] += 1

    def run_aot(rec: Any) -> Callable:
        from functorch.compile import min_cut_rematerialization_partition
        from torch._dynamo.backends.common import aot_autograd

        from .graph.complex_pairs import rewrite_complex
        from .graph.decompositions import decomposition_table

        rewrite_complex(gm)  # complex intermediates (rotary embeddings) as real pairs

        aot = aot_autograd(
            fw_compiler=_make_compiler("forward", cfg, name, rec),
            bw_compiler=_make_compiler("backward", cfg, name, rec),
            inference_compiler=_make_compiler("inference", cfg, name, rec),
            decompositions=decomposition_table(),
            partition_fn=min_cut_rematerialization_partition,
            keep_inference_input_mutations=True,
        )
        with _sdpa_backends():
            return aot(gm, example_inputs)
    return compile_dynamo_cached(gm, example_inputs, cfg, run_aot, name=name)
