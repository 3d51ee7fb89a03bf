"""Flash attention on TensorE: ``aten._scaled_dot_product_flash_attention_for_cpu`` and its backward.

* ``common``: what both share, the package's public seam: limits, mask constants, the case check
  (``unsupported``), ``HeadTensor`` operands, copies and transposes, ``AttnCtx`` (engines, masks);
* ``forward``: the forward kernel (``FwdPlan``, ``FwdEmitter``: online softmax over key steps);
* ``backward``: the FA-2 backward kernel (``BwdPlan``, ``BwdEmitter``: dK, dV per key group, dQ in SBUF);
* ``explicit``: ``neuron_inductor::softmax_attention``, explicit attention written out in a model
  (matched by ``graph/attention_pattern.py``) on the forward kernel in strict mode (eager's
  non-finite rows), grouped K/V heads read in place.

Importing a module registers its lowering; ``lowering/__init__.py`` imports them all. This file
imports nothing, so a module of the package can be imported without the others.
"""
