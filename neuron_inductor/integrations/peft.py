"""PEFT (LoRA / DoRA) under ``torch.compile``: one workaround for a Dynamo graph break.

LoRA needs nothing from us: ``Trainer(torch_compile=True, torch_compile_backend="neuron")`` on a
``get_peft_model`` model compiles one forward and one backward graph, and the frozen base weights get
no gradient (AOTAutograd only differentiates what requires grad).

DoRA does, on torch 2.13 with peft 0.21: every DoRA layer's forward calls
``peft.utils.integrations.dequantize_module_weight``, whose torchao check
``type(module.weight).__module__.startswith("torchao.")`` is a call Dynamo cannot trace, so each
layer splits the graph (41 graphs for a 2-layer Llama, each compiled separately).
:func:`enable_dora_compile` puts a function in front of it that returns a plain ``nn.Parameter``
weight directly (the case the check exists to tell apart from quantized weights) and defers
everything else to peft's own function; results are unchanged.
"""
from __future__ import annotations

from typing import Any

import torch

__all__ = ["enable_dora_compile"]


def enable_dora_compile() -> bool:
    """Make peft's DoRA layers traceable as one graph; returns whether a change was needed.

    Idempotent. Quantized weights (HQQ, torchao, bitsandbytes) still go through peft's function.
    """
    import peft.tuners.lora.dora as dora

    current = dora.dequantize_module_weight
    if getattr(current, "_neuron_inductor", False):
        return False

    def dequantize_module_weight(module: torch.nn.Module) -> Any:
        weight = getattr(module, "weight", None)
        if type(weight) is torch.nn.Parameter and not hasattr(module, "W_q"):
            return weight
        return current(module)

    dequantize_module_weight._neuron_inductor = True  # type: ignore[attr-defined]
    dora.dequantize_module_weight = dequantize_module_weight
    return True
